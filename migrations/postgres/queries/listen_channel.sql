-- Listener: subscribe this session to one notification channel (a quoted identifier).
LISTEN {channel}
