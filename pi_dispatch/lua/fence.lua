--[[
  A running job's lock, read and, when its holder's renewal has lapsed, renewed (`worker/fencing.py`).
  The renewal is PEXPIRE, not BullMQ's SET: a full store (maxmemory with noeviction) refuses a script whose first
  write may grow it, and PEXPIRE and SREM cannot, so a lock held under a full store stays held, and the job with it.
  KEYS[1] the job's lock, KEYS[2] the queue's stalled set
  ARGV[1] the holder's token, ARGV[2] the lock duration (ms), ARGV[3] the job id, ARGV[4] renew below (ms)
  Returns {the lock's value (nil: gone), its remaining life in ms (after a renewal, the duration)}.
]]
local value = redis.call("GET", KEYS[1])
local left = redis.call("PTTL", KEYS[1])
if value == ARGV[1] and left >= 0 and left < tonumber(ARGV[4]) then
  redis.call("PEXPIRE", KEYS[1], ARGV[2])
  redis.call("SREM", KEYS[2], ARGV[3])
  left = tonumber(ARGV[2])
end
return {value, left}
