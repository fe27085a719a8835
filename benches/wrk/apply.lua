-- wrk script: POST /api/v1/applications with a fresh operation id and a
-- fresh subject on every request, so every request creates an operation.
local counter = 0

local function uuid()
  local t = "xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx"
  return (t:gsub("[xy]", function (c)
    local v = (c == "x") and math.random(0, 15) or math.random(8, 11)
    return string.format("%x", v)
  end))
end

-- Each thread gets its own tag and random sequence (thread Lua states
-- otherwise start from the same seed and would repeat each other's ids).
math.randomseed(os.time())
function setup(thread)
  thread:set("thread_tag", tostring(math.random(1, 1e9)))
end

function init(args)
  math.randomseed(tonumber(thread_tag))
end

request = function()
  counter = counter + 1
  local body = string.format(
    '{"operationId":"%s","targetKey":"team.access","subjectId":"s-%s-%d","reason":"load"}',
    uuid(), thread_tag, counter)
  return wrk.format("POST", nil, {
    ["Content-Type"] = "application/json",
    ["X-Auth-Request-User"] = "bench",
  }, body)
end
