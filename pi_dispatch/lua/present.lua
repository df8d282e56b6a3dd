--[[
  Which of many keys exist, in one command: a job page asks every host's queue whether it holds the job.

  KEYS   the keys (at most KEYS_PER_SCRIPT a call)
  Returns: the positions (from 1) of the keys that exist, in order.
]]
local found = {}
for i, key in ipairs(KEYS) do
  if redis.call('EXISTS', key) == 1 then
    found[#found + 1] = i
  end
end
return found
