"""What happens to a connection and a request before any handler: the connection limits,
the access log, the cross-site guard, admission while draining, auth, refusals."""
