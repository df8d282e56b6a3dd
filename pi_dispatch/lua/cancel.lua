--[[
  Cancel one job that is waiting, delayed, prioritized or paused: it leaves its list or set and is failed with the
  reason given, atomically, keeping its data, options and attempts (so `pi-dispatch retry` can run it again). A job
  a worker holds (its lock exists) or that has finished is left as it is.

  KEYS[1] wait (list)   KEYS[2] delayed (zset)   KEYS[3] prioritized (zset)   KEYS[4] paused (list)
  KEYS[5] failed (zset) KEYS[6] job (hash)       KEYS[7] job lock             KEYS[8] events (stream)
  ARGV[1] job id        ARGV[2] now (epoch ms)   ARGV[3] reason               ARGV[4] the queue's key prefix
  Returns: the state it left ("wait", "delayed", "prioritized", "paused"); -1 a worker holds it; -2 it is gone;
  -3 it is neither waiting nor held (active without a lock, or finished).
]]
local rcall = redis.call
local jobId = ARGV[1]
if rcall("EXISTS", KEYS[6]) == 0 then return -2 end
if rcall("EXISTS", KEYS[7]) == 1 then return -1 end

local state
if rcall("LREM", KEYS[1], 0, jobId) > 0 then
  state = "wait"
elseif rcall("ZREM", KEYS[2], jobId) > 0 then
  state = "delayed"
elseif rcall("ZREM", KEYS[3], jobId) > 0 then
  state = "prioritized"
elseif rcall("LREM", KEYS[4], 0, jobId) > 0 then
  state = "paused"
else
  return -3
end

rcall("HSET", KEYS[6], "failedReason", ARGV[3], "finishedOn", ARGV[2])
rcall("ZADD", KEYS[5], ARGV[2], jobId)
local deduplication = rcall("HGET", KEYS[6], "deid")
if deduplication then
  local key = ARGV[4] .. "de:" .. deduplication
  if rcall("GET", key) == jobId then rcall("DEL", key) end -- a new delivery is not a duplicate of a cancelled job
end
rcall("XADD", KEYS[8], "MAXLEN", "~", 10000, "*", "event", "failed", "jobId", jobId, "failedReason", ARGV[3],
  "prev", state)
return state
