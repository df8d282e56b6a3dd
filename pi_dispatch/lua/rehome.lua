--[[
  Move one job that is waiting, delayed or prioritized on a dead host's queue to another queue, atomically:
  the job is on exactly one queue before and after, whoever dies when. It keeps its id, data, attempts and
  stalled count, and a delayed job its score (so a held job stays held for what is left of its delay).
  Never overwrites: a destination that already holds a job under this id leaves the job where it is.

  KEYS[1]  source wait         (list)       KEYS[8]  destination prioritized (zset)
  KEYS[2]  source delayed      (zset)       KEYS[9]  destination marker      (zset)
  KEYS[3]  source prioritized  (zset)       KEYS[10] destination meta        (hash)
  KEYS[4]  source job          (hash)       KEYS[11] destination priority counter
  KEYS[5]  destination job     (hash)       KEYS[12] destination events      (stream)
  KEYS[6]  destination wait    (list)       KEYS[13] source logs             (list)
  KEYS[7]  destination delayed (zset)       KEYS[14] destination logs        (list)
  KEYS[15] source dedup key                 KEYS[16] destination dedup key
  ARGV[1]  job id
  ARGV[2]  the job's dedup id as read before the call ("" when none)
  ARGV[3]  "steal" for a steal (a peer with a free slot takes a waiting job); "" for re-homing and drains
  ARGV[4]  for a steal: the source queue's name, kept on the job as the queue it was routed to
  A steal takes only a waiting or prioritized job (a delayed one is held by its own host's wait gate), and only
  once per wait: the job keeps `pdStolen` (its `ats`, BullMQ's count of times it was taken) and `pdRouted` (the
  first queue it was stolen from), so it cannot move again until it has been taken.
  Returns: "wait", "delayed" or "prioritized" (moved); -1 the id is taken on the destination; -2 the job is gone;
  -3 the job is not waiting, delayed or prioritized there (active, finished, or moved already); -4 a steal of a
  job that was stolen already in this wait.
]]
local rcall = redis.call
local jobId = ARGV[1]
if rcall("EXISTS", KEYS[5]) == 1 then return -1 end
if rcall("EXISTS", KEYS[4]) == 0 then return -2 end

local stealing = ARGV[3] == "steal"
local taken = rcall("HGET", KEYS[4], "ats") or "0"
if stealing and rcall("HGET", KEYS[4], "pdStolen") == taken then return -4 end

local state
local score = rcall("ZSCORE", KEYS[2], jobId)
if score and stealing then
  return -3
elseif score then
  state = "delayed"
  rcall("ZREM", KEYS[2], jobId)
elseif rcall("LREM", KEYS[1], 0, jobId) > 0 then
  state = "wait"
elseif rcall("ZSCORE", KEYS[3], jobId) then
  state = "prioritized"
  rcall("ZREM", KEYS[3], jobId)
else
  return -3
end

rcall("RENAME", KEYS[4], KEYS[5])
if stealing then
  rcall("HSET", KEYS[5], "pdStolen", taken)
  rcall("HSETNX", KEYS[5], "pdRouted", ARGV[4]) -- the router's choice, whatever moved the job since
end
if rcall("EXISTS", KEYS[13]) == 1 then rcall("RENAME", KEYS[13], KEYS[14]) end
local deduplication = rcall("HGET", KEYS[5], "deid")
if deduplication and deduplication == ARGV[2] and rcall("GET", KEYS[15]) == jobId
    and rcall("EXISTS", KEYS[16]) == 0 then
  rcall("RENAME", KEYS[15], KEYS[16]) -- the dedup window moves with the job, its expiry kept
end

local paused = rcall("HEXISTS", KEYS[10], "paused") == 1
if state == "delayed" then
  rcall("ZADD", KEYS[7], score, jobId)
  local first = rcall("ZRANGE", KEYS[7], 0, 0, "WITHSCORES")
  if first[2] then rcall("ZADD", KEYS[9], tonumber(first[2]) / 0x1000, "1") end
  rcall("XADD", KEYS[12], "MAXLEN", "~", 10000, "*", "event", "delayed", "jobId", jobId,
    "delay", math.floor(tonumber(score) / 0x1000))
else
  if state == "wait" then
    rcall("RPUSH", KEYS[6], jobId) -- it has waited already: next to be taken
  else
    local priority = tonumber(rcall("HGET", KEYS[5], "priority") or "0") or 0
    local counter = rcall("INCR", KEYS[11])
    rcall("ZADD", KEYS[8], priority * 0x100000000 + counter % 0x100000000, jobId)
  end
  if not paused then rcall("ZADD", KEYS[9], 0, "0") end
  rcall("XADD", KEYS[12], "MAXLEN", "~", 10000, "*", "event", "waiting", "jobId", jobId)
end
return state
