--[[
  Which of many keys hold a BullMQ job, in one command: a job page asks every host's queue whether it holds the job.
  A job's key is a hash with the `timestamp` every add writes. A queue's own keys share the job keys' prefix but are
  never that (`meta` is a hash without it; `wait`, `events`, `id` and a job's `:lock` are other types), so an id an
  operator types such as `meta` finds no job, and `cancel meta` removes nothing of the queue's.

  KEYS   the keys (at most KEYS_PER_SCRIPT a call)
  Returns: the positions (from 1) of the keys that hold a job, in order.
]]
local found = {}
for i, key in ipairs(KEYS) do
  if redis.call('TYPE', key).ok == 'hash' and redis.call('HEXISTS', key, 'timestamp') == 1 then
    found[#found + 1] = i
  end
end
return found
