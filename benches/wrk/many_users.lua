-- wrk script: GET as one of 100,000 identities, so the rate limiter works
-- on many keys the way it does in production.
math.randomseed(os.time())
function setup(thread)
  thread:set("seed", math.random(1, 1e9))
end
function init(args)
  math.randomseed(seed)
end
request = function()
  return wrk.format("GET", nil, { ["X-Auth-Request-User"] = "user-" .. math.random(1, 100000) })
end
