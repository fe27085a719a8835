-- wrk script: GET with the bench identity.
wrk.headers["X-Auth-Request-User"] = "bench"
