-- now.lua: the start of every entry point: NOW, Redis TIME in us, read
-- once; no other clock is read.
if not call then
  floor, ceil, max, min, format, match, tonumber, call, sort, unpack, select, gmatch, log, concat = globals()
end
do
  local t = call('TIME')
  NOW = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
