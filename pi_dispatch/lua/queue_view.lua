--[[
  What an operator is shown of a batch of queues, read in one call (`fleet/queueview.py`).

  ARGV[1]: how many of the oldest waiting jobs to read per queue; ARGV[2]: how many job fields follow;
  ARGV[3 .. 2 + F]: the job-hash fields read of each; then, per queue, its key prefix ("bull:<queue>:") and its
  host's re-home clock key.

  Answers one array per queue: the five counts, the re-home clock (nil: none), the oldest waiting job's
  timestamp (nil: none), then for each job read, oldest first, its id and its fields in the order given; 0 for a
  queue whose keys are not what BullMQ writes (a broken or hostile entry must not cost the reader the others).
  A queue's keys are reached by its prefix, as BullMQ's own scripts reach a job's hash by its prefix and id:
  naming five keys per queue for thousands of queues was most of what a reader spent sending the call.
]]
local rcall = redis.call
local count = tonumber(ARGV[1])
local fieldCount = tonumber(ARGV[2])
local fields = {}
for index = 1, fieldCount do
  fields[index] = ARGV[2 + index]
end
local function read(prefix, clock)
  local wait = prefix .. "wait"
  local answer = {
    rcall("LLEN", wait), rcall("ZCARD", prefix .. "delayed"), rcall("ZCARD", prefix .. "prioritized"),
    rcall("LLEN", prefix .. "active"), rcall("ZCARD", prefix .. "failed"), rcall("GET", clock), false,
  }
  if answer[1] > 0 then
    local oldest = rcall("LINDEX", wait, -1)
    if oldest then
      answer[7] = rcall("HGET", prefix .. oldest, "timestamp")
    end
    if count > 0 then
      local ids = rcall("LRANGE", wait, -count, -1)
      for index = #ids, 1, -1 do -- BullMQ pushes new jobs at the left: the oldest is last
        local jobId = ids[index]
        answer[#answer + 1] = jobId
        local values = rcall("HMGET", prefix .. jobId, unpack(fields))
        for field = 1, fieldCount do
          answer[#answer + 1] = values[field]
        end
      end
    end
  end
  return answer
end

local answers = {}
for position = 3 + fieldCount, #ARGV, 2 do
  local ok, answer = pcall(read, ARGV[position], ARGV[position + 1])
  answers[#answers + 1] = ok and answer or 0
end
return answers
