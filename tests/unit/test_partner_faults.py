"""The reference partner's fault specifications and their use counts.

Source: ``adapters/partner/faults.py`` (the fault keys); DESIGN §5.
"""

from __future__ import annotations

import pytest

from adapters.partner.faults import ApplyTiming, Fault, FaultBook, FaultError, HostileBody


def test_header_and_json_forms_agree() -> None:
    header = Fault.parse("status=503; retry_after=2 ;times=1;drop=false;body=nul;apply=after;delay=0.5")
    data = Fault.from_mapping({"status": 503, "retry_after": "2", "times": 1, "drop": False, "body": "nul",
                               "apply": "after", "delay": 0.5})
    assert header == data == Fault(status=503, retry_after="2", times=1, body=HostileBody.NUL,
                                   apply=ApplyTiming.AFTER, delay=0.5)
    assert Fault.parse(header.describe()) == header


@pytest.mark.parametrize("text", ["nope=1", "status=abc", "status=700", "delay=-1", "delay=nan", "times=0",
                                  "body=tiny", "apply=sometimes", "drop=maybe", "redirect=/a\r\nX: y"])
def test_malformed_faults_are_refused(text: str) -> None:
    with pytest.raises(FaultError):
        Fault.parse(text)


@pytest.mark.parametrize(("fault", "normal", "wire", "timing"), [
    (Fault(), 200, 200, ApplyTiming.BEFORE),
    (Fault(accept=True), 202, 202, ApplyTiming.BEFORE),
    (Fault(status=500), 200, 500, ApplyTiming.NEVER),
    (Fault(status=500, apply=ApplyTiming.BEFORE), 200, 500, ApplyTiming.BEFORE),
    (Fault(retry_after="3"), 200, 503, ApplyTiming.NEVER),
    (Fault(redirect="/x"), 200, 307, ApplyTiming.NEVER),
    (Fault(redirect="/x", status=308), 200, 308, ApplyTiming.NEVER),
    (Fault(drop=True), 200, None, ApplyTiming.NEVER),
    (Fault(body=HostileBody.HUGE), 200, 200, ApplyTiming.BEFORE),
    (Fault(delay=1.0), 200, 200, ApplyTiming.BEFORE),
])
def test_wire_status_and_default_timing(fault: Fault, normal: int, wire: int | None, timing: ApplyTiming) -> None:
    assert fault.wire_status(normal) == wire
    assert fault.timing(wire) is timing


def test_header_fault_counts_per_key_then_falls_back_to_the_path_fault() -> None:
    book = FaultBook()
    book.set_path("/pay", Fault(status=500, times=1))
    header = "status=503;times=2"
    picks = [book.choose(path="/pay", header=header, key="k1").status for _ in range(4)]
    assert picks == [503, 503, 500, None]
    assert book.choose(path="/pay", header=header, key="k2").status == 503
    book.clear()
    assert book.choose(path="/pay", header=None, key="k1") == Fault()


def test_hostile_bodies_are_hostile() -> None:
    assert len(HostileBody.HUGE.render()) == 5 * 1024 * 1024
    assert b"\x00" in HostileBody.NUL.render()
    with pytest.raises(UnicodeDecodeError):
        HostileBody.INVALID_UTF8.render().decode("utf-8")
