/* The opledger protocol: one operation, NW workers with leases and fencing epochs, a provider,
   callbacks (duplicated, delayed, forged), an operator, settlers, a lease clock and a deadline
   timer. The transition table and the decisions come from rules.pml, GENERATED from the Python
   code by docs/model/generate.py; this file holds only the environment (who may act when) and
   the properties. What is abstracted, the bounds and how to run it: docs/model.md.

   Properties: every safety property is an assertion `violated_<name>` (SPIN's report and trail
   name it); progress is the LTL formula `progress`, checked under weak fairness. */

#define LIVE_LEASES (w_lease[0] + w_lease[1] + w_lease[2])   /* used by the generated rules */
#define QUIESCENT (exec == X_AMBIGUOUS || abandoned || stl == S_SETTLED || stl == S_BLOCKED)

#include "rules.pml"

#define NW 3              /* workers */
#ifndef MAX_EXPIRIES
#define MAX_EXPIRIES 1    /* lease expiries (each may lead to a takeover by another worker) */
#endif
#ifndef MAX_CRASHES
#define MAX_CRASHES 1     /* worker crashes (a restart loses the worker's local state) */
#endif
#ifndef MAX_RESOLVES
#define MAX_RESOLVES 1    /* operator resolutions */
#endif
#define NCB 3             /* callback ids: 0 progress, 1 the outcome, 2 forged */

/* ---------------------------------------------------------------- the operation (the aggregate) */
#ifndef MODE
#define MODE M_IDEMPOTENT
#endif
byte mode = MODE;           /* the delivery mode: one per run (-DMODE=n), every mode is checked */
mtype exec = X_PENDING;
mtype stl = S_NONE;
byte epoch = 0;
bool lease_live = false;    /* a lease is held and has not expired */
byte attempts = 0;
bool pa = false;            /* possibly_applied */
bool cancel_req = false;
bool cancel_refused = false;
bool follow_poll = true;    /* accepted work is polled (callback mode: waits for the callback) */
byte outcome_ref = 0;       /* which recorded outcome a settlement names (attempt, epoch) */
bool abandoned = false;
bool late = false;
byte stl_tries = 0;
bool cb_seen[NCB];
byte cb_facts[NCB];

/* ---------------------------------------------------------------- observers (not the aggregate's) */
bool w_lease[NW];           /* worker w holds a live lease, as far as it knows */
byte sends = 0;             /* requests that left for the provider */
byte entity_changes = 0;    /* settlement actions applied to the source entity */
bool was_terminal = false;  /* a terminal outcome was recorded */
byte expiries = 0;
byte crashes = 0;
byte resolves = 0;
bit violated_budget, violated_ambiguous_retry, violated_terminal, violated_settle_once, violated_duplicate,
    violated_forged, violated_timeout, violated_one_lease, violated_record_before_send, violated_stale_epoch;


inline RELEASE() { lease_live = false; w_lease[0] = false; w_lease[1] = false; w_lease[2] = false }
inline TRY_USED() { if :: stl_tries < STL_MAX + 1 -> stl_tries++ :: else -> skip fi }
inline REACH_OUTCOME() {
  RELEASE(); outcome_ref++;
  if :: TERMINAL -> was_terminal = true; stl = S_PENDING :: else -> skip fi
}

mtype = { A_SUCCEEDED, A_FAILED, A_RETRYABLE, A_LOST, A_ACCEPTED, A_RUNNING, A_CANCELLED, A_CANCEL_REFUSED }

/* ---------------------------------------------------------------- workers */
active [NW] proctype worker() {
  byte w = _pid;            /* workers are the first processes: 0..NW-1 */
  byte e; byte a; mtype step; mtype r; mtype answer;
end_idle:
  do
  :: atomic { DUE_TAKE && can_claim(w) -> do_claim(w); e = epoch; claim_plan(step) };
     if
     :: step == STEP_SEND -> goto send
     :: step == STEP_RECOVER -> a = attempts; goto lost      /* the previous holder's attempt is open */
     :: step == STEP_CANCEL -> atomic { if :: can_cancel(e) -> do_cancel(e) :: else -> skip fi }
     :: step == STEP_EXHAUST -> atomic { if :: can_exhaust_budget(e, W_NONE_APPLIED) -> do_exhaust_budget(e, W_NONE_APPLIED)
                                          :: else -> skip fi }
     :: step == STEP_FOLLOW -> goto follow
     :: else -> skip
     fi;
     goto reset;
send:
     atomic {
       if
       :: can_start_attempt(e) -> do_start_attempt(e); a = attempts
       :: else ->
#ifdef SEND_WITHOUT_RECORD
          a = attempts + 1                              /* planted: sends although refused */
#else
          goto reset                                 /* refused (stale, lapsed, cancelled): stop */
#endif
       fi
     };
     atomic {                                            /* egress, only under its own live lease */
       if :: !w_lease[w] -> goto reset :: else -> skip fi;   /* executors.calls: lapsed, not made */
       sends++;
       violated_record_before_send = !(sends <= attempts); assert(!violated_record_before_send);
       violated_ambiguous_retry = !(!(mode == M_NON_IDEMPOTENT && pa)); assert(!violated_ambiguous_retry)
     };
     if                                                  /* the provider's answer */
     :: answer = A_SUCCEEDED
     :: answer = A_FAILED                                /* known, not retryable */
     :: answer = A_RETRYABLE                             /* known, retryable */
     :: answer = A_LOST                                  /* response lost */
     :: answer = A_ACCEPTED
     :: crashes < MAX_CRASHES -> crashes++; goto reset   /* crash: restarts idle, knowing nothing */
     fi;
     if
     :: answer == A_LOST -> goto lost
     :: else -> skip
     fi;
     atomic {
       decide_failed(r);
       if
       :: answer == A_SUCCEEDED && can_succeed(e, a) -> do_succeed(e, a)
       :: answer == A_FAILED && can_fail(e, a) -> do_fail(e, a)
       :: answer == A_RETRYABLE && r == D_RETRY && can_schedule_retry(e, a, 0) -> do_schedule_retry(e, a, 0)
       :: answer == A_RETRYABLE && r == D_GIVE_UP && can_exhaust_budget(e, W_NONE_APPLIED) ->
          do_exhaust_budget(e, W_NONE_APPLIED)
       :: answer == A_ACCEPTED && can_accept(e, a) -> do_accept(e, a)
       :: else -> skip                                   /* refused: a stale or lapsed holder stops */
       fi };
     goto reset;
lost:
     atomic {
       decide_lost(r);
       if
       :: r == D_RETRY && can_schedule_retry(e, a, 1) -> do_schedule_retry(e, a, 1)
       :: r == D_GIVE_UP && can_exhaust_budget(e, W_POSSIBLY_APPLIED) -> do_exhaust_budget(e, W_POSSIBLY_APPLIED)
       :: r == D_AWAIT && can_accept(e, a) -> do_accept(e, a)
       :: r == D_RECORD && can_mark_ambiguous(e, a) -> do_mark_ambiguous(e, a)
       :: r == D_LOOKUP -> skip
       :: else -> skip
       fi };
     if
     :: r == D_LOOKUP ->                                 /* recoverable_remote_id asks the provider */
        if
        :: answer = A_LOST                              /* "not received": nothing applied */
        :: answer = A_SUCCEEDED                         /* found it done */
        :: answer = A_FAILED                            /* the lookup failed */
        fi;
        atomic {
          decide_not_received(r);
          if
          :: answer == A_LOST && r == D_RETRY && can_schedule_retry(e, a, 0) -> do_schedule_retry(e, a, 0)
          :: answer == A_LOST && r == D_GIVE_UP && can_exhaust_budget(e, W_NONE_APPLIED) ->
             do_exhaust_budget(e, W_NONE_APPLIED)
          :: answer == A_SUCCEEDED && can_succeed(e, a) -> do_succeed(e, a)
          :: answer == A_FAILED && can_mark_ambiguous(e, a) -> do_mark_ambiguous(e, a)
          :: else -> skip
          fi }
     :: else -> skip
     fi;
     goto reset;
follow:                                                  /* accepted work under a poll lease */
     if
     :: answer = A_SUCCEEDED
     :: answer = A_FAILED
     :: answer = A_RUNNING                               /* still running: the poll lease runs out */
     :: cancel_req -> answer = A_CANCELLED               /* the provider cancelled it */
     :: cancel_req -> answer = A_CANCEL_REFUSED
     fi;
     atomic {
       if
       :: answer == A_SUCCEEDED && can_succeed(e, attempts) -> do_succeed(e, attempts)
       :: answer == A_FAILED && can_fail(e, attempts) -> do_fail(e, attempts)
       :: answer == A_CANCELLED && can_cancel(e) -> do_cancel(e)
       :: answer == A_CANCEL_REFUSED && can_cancel_failed(e, attempts) -> do_cancel_failed(e, attempts)
       :: else -> skip
       fi };
reset:                                                   /* idle again: forget this claim's locals */
     atomic { e = 0; a = 0; step = 0; r = 0; answer = 0 }
  od
}

/* ---------------------------------------------------------------- time: leases and deadlines */
active proctype clock() {
end_clock:
  do
  :: atomic { lease_live && expiries < MAX_EXPIRIES -> expiries++; printf("CLOCK expire\n"); RELEASE() }
  od
}

active proctype timer() {
  mtype when;
end_timer:
  do
  :: atomic { ACTIVE ->        /* at any moment: the model has no clock (a deadline outlasts a lease) */
       violated_timeout = !(HAS_DEADLINE); assert(!violated_timeout);
       when = (DEADLINE_AMBIGUOUS -> W_POSSIBLY_APPLIED : W_NONE_APPLIED);
       if :: can_exceed_deadline(when) -> do_exceed_deadline(when) :: else -> skip fi }
  od
}

/* ---------------------------------------------------------------- callbacks */
/* The inbound adapter's check and receive_callback, in one step: a callback is "delayed" by
   being delivered later, "duplicated" by being delivered again, "forged" when not authentic. */
inline deliver(cb, outc, auth, a) {
  if :: can_receive_callback(cb, outc, auth, a) -> do_receive_callback(cb, outc, auth, a) :: else -> skip fi
}

active proctype provider_callbacks() {                          /* callback mode: the provider reports */
  mtype outc; byte a;
end_wait:                                                /* a valid end: nothing was sent */
  atomic { mode == M_CALLBACK && sends > 0 -> a = attempts; if :: outc = W_SUCCEEDED :: outc = W_FAILED fi };
  atomic { deliver(0, W_PROGRESS, 1, a) };
  atomic { deliver(1, outc, 1, a) };
  if                                                     /* redelivered */
  :: true -> atomic { deliver(0, W_PROGRESS, 1, a) }
  :: true -> atomic { deliver(1, outc, 1, a) }
  :: skip
  fi;
  atomic { outc = 0; a = 0 }
}

active proctype forger() {                                      /* an unauthenticated callback */
end_forger:
  atomic { mode == M_CALLBACK && sends > 0 -> deliver(2, W_SUCCEEDED, 0, attempts) }
}

/* ---------------------------------------------------------------- people and settlement */
active proctype operator() {
end_operator:
  do
  :: atomic { ACTIVE && !cancel_req -> do_request_cancel() }
  :: atomic { DUE_CANCEL && can_cancel(255) -> do_cancel(255) }          /* unleased pending: anyone */
  :: atomic { resolves < MAX_RESOLVES && can_resolve(W_RETRY) -> resolves++; do_resolve(W_RETRY) }
  :: atomic { resolves < MAX_RESOLVES && can_resolve(W_SUCCEEDED) -> resolves++; do_resolve(W_SUCCEEDED) }
  :: atomic { resolves < MAX_RESOLVES && can_resolve(W_FAILED) -> resolves++; do_resolve(W_FAILED) }
  :: atomic { resolves < MAX_RESOLVES && can_resolve(W_ABANDON) -> resolves++; do_resolve(W_ABANDON) }
  :: atomic { resolves < MAX_RESOLVES && can_resolve(W_RETRY_SETTLEMENT) -> resolves++; do_resolve(W_RETRY_SETTLEMENT) }
  od
}

active [2] proctype settler() {
  byte sref;
end_settler:
  do
  :: atomic { can_settle(outcome_ref) -> sref = outcome_ref };   /* reads the outcome it settles */
     atomic {
       if
       :: can_settle(sref) -> do_settle(sref)
       :: SETTLEMENT_TRY_LEFT && can_fail_settlement(sref) -> do_fail_settlement(sref)   /* action failed */
       :: !SETTLEMENT_TRY_LEFT && can_block_settlement(sref) -> do_block_settlement(sref)
       :: else -> skip
       fi }
  od
}

ltl progress { <> QUIESCENT }
