-- pantheon-stream-guard: an HAProxy (2.5+) Lua filter on the model backends of `pantheon router`.
--
-- An instance that dies while streaming must not leave the client with a silently short answer.
-- HAProxy treats a chunked response cut short as a transport error: it runs no filter and cuts the
-- client's connection. So the router asks instances (X-Pantheon-Stream-End: close) to send event
-- streams close-delimited; their end then reaches this filter as an ordinary end of input, and:
--   * the response goes to the client chunked (this filter adds the header), so the client can tell
--     a finished stream (last chunk) from a cut connection;
--   * `data: [DONE]` ends the message at once (the instance sends nothing after it);
--   * input that ends before `[DONE]` gets an OpenAI-style error event and `[DONE]` appended, the
--     events a single instance sends when its worker fails.
-- A reset or a silent instance (its host lost) is still a transport error HAProxy handles alone: the
-- client sees the chunked body cut, never a short stream presented as complete (docs/reliability.md).
-- Events pass through unchanged and unbuffered; only the last few bytes are remembered.

local DONE = "data: [DONE]\n\n"
local TAIL = #DONE

local Guard = {}
Guard.id = "pantheon-stream-guard"
Guard.flags = filter.FLT_CFG_FL_HTX
Guard.__index = Guard

-- `self` is the configured filter (see register_filter below); one guard per stream
function Guard:new()
    return setmetatable({tail = "", ended = false, chunks = false, quiet = self.quiet}, Guard)
end

local function first(headers, name)
    local values = headers[name]
    return values and values[0]
end

-- a stream the instance delimits by closing: no length, no chunking
local function close_delimited_events(msg)
    local headers = msg:get_headers()
    local ctype = first(headers, "content-type")
    return ctype ~= nil and string.find(string.lower(ctype), "text/event-stream", 1, true) == 1
        and first(headers, "content-length") == nil and first(headers, "transfer-encoding") == nil
end

function Guard:http_headers(txn, msg)
    if not msg:is_resp() then  -- HTTP/1.0 has no chunks (and an HTTP/2 client has frames)
        self.chunks = txn.f:req_ver() == "1.1"
    elseif close_delimited_events(msg) then
        if self.chunks then
            msg:add_header("transfer-encoding", "chunked")
        end
        filter.register_data_filter(self, msg.channel)
    end
end

local function escape(s)
    return (string.gsub(s, '[%c"\\]', function(c) return string.format("\\u%04x", string.byte(c)) end))
end

local function lost_event(server)
    local message = "the instance streaming this answer (" .. escape(server) .. ") stopped before the "
        .. "end of the stream; the answer is incomplete, retry the request"
    return 'data: {"error":{"message":"' .. message .. '","type":"server_error","param":null,'
        .. '"code":"instance_lost"}}\n\n' .. DONE
end

-- may_recv() is false once the instance closed its side, but also while a slow client lets the
-- buffer fill into its reserve; below `quiet` buffered bytes (a quarter of tune.bufsize, far from the
-- reserve) only the closed input explains it, so a healthy stream is never marked lost.
local function input_closed(guard, msg)
    return not msg:may_recv() and msg:input() + msg:output() < guard.quiet
end

function Guard:http_payload(txn, msg)
    if self.ended then
        return
    end
    local n = msg:input()
    if n > 0 then
        local take = math.min(n, TAIL)
        self.tail = string.sub(self.tail .. msg:body(n - take, take), -TAIL)
    end
    if self.tail ~= DONE and input_closed(self, msg) then
        msg:append(lost_event(txn.f:srv_name() or "?"))
        self.tail = DONE
    end
    if self.tail == DONE then
        msg:set_eom()
        self.ended = true
    end
end

-- `filter lua.pantheon-stream-guard QUIET_BYTES`
core.register_filter("pantheon-stream-guard", Guard, function(guard, args)
    guard.quiet = assert(tonumber(args[1]), "pantheon-stream-guard needs its quiet byte count")
    return guard
end)
