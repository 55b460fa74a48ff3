"""OpenAI's Responses API (/v1/responses) over the chat routes' machinery, and its stored responses."""

import time
import uuid

from pantheon.serve.http import chat_plan, responses_background, responses_fields, responses_truncation, sse
from pantheon.serve.http.backend import BackendError
from pantheon.serve.http.completions import RestatedChat, SseBody
from pantheon.serve.http.errors import RequestError
from pantheon.serve.http.field_types import bad, show
from pantheon.serve.response_store import MissingResponse, StoreUnavailable
from pantheon.serve.settings import RESPONSE_ID_HEADER

# per output item kind: its content part's type and the stream events of that part's text
PARTS = {"message": ("output_text", "response.output_text.delta", "response.output_text.done"),
         "reasoning": ("reasoning_text", "response.reasoning_text.delta", "response.reasoning_text.done")}


def _id(prefix):
    return f"{prefix}_{uuid.uuid4().hex}"


def _part(kind, text, logprobs=()):
    if kind == "reasoning":
        return {"type": "reasoning_text", "text": text}
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": list(logprobs)}


def _function_call(call):
    return {"type": "function_call", "id": _id("fc"), "call_id": call["id"], "name": call["function"]["name"],
            "arguments": call["function"]["arguments"], "status": "completed"}


class _Reply:
    """One Responses answer of a started choice: the whole response object, or its stream of events."""

    def __init__(self, served, choice, values, store=None):
        self.model, self.choice, self.gen, self.values = served.name, choice, choice.gen, values
        self.store = store if values.get("store", True) else None
        self.background = bool(values.get("background", False))
        self.close_id = served.think_ids[1] if served.think_ids else None
        self.id, self.created = _id("resp"), int(time.time())
        self.items, self.seq = [], 0  # streaming: the output items done so far, the next sequence_number
        self.begun = False  # streaming: response.in_progress was sent
        self.open, self.text, self.scores = None, "", []  # streaming: the item being written, its text, logprobs

    def response(self, status, output, usage=None, error=None):
        v = self.values
        think = v.get("reasoning", {})
        return {"id": self.id, "object": "response", "created_at": self.created, "status": status, "error": error,
                "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
                "instructions": v.get("instructions"), "max_output_tokens": v.get("max_output_tokens"),
                "model": self.model, "output": output, "parallel_tool_calls": v.get("parallel_tool_calls", True),
                "previous_response_id": v.get("previous_response_id"), "reasoning": {"effort": think.get("effort"),
                                                            "summary": think.get("summary")},
                "store": self.store is not None, "temperature": v.get("temperature"),
                "text": v.get("text", {"format": {"type": "text"}}),
                "tool_choice": v.get("tool_choice", "auto"), "tools": v.get("tools", []), "top_p": v.get("top_p"),
                "top_logprobs": v.get("top_logprobs"), "truncation": v.get("truncation", "disabled"), "usage": usage,
                "user": v.get("user"), "metadata": v.get("metadata", {}),
                "background": self.background}

    def status(self):
        """incomplete when max_output_tokens cut the reply, else completed."""
        return "incomplete" if self.gen.finish_reason == "length" else "completed"

    def usage(self, reply):
        counts = self.gen.usage
        prompt, out = counts["prompt_tokens"], counts["completion_tokens"]
        return {"input_tokens": prompt, "input_tokens_details": {
                    "cached_tokens": counts["prompt_tokens_details"]["cached_tokens"]},
                "output_tokens": out, "output_tokens_details": {"reasoning_tokens": self._reasoning_tokens(reply)},
                "total_tokens": prompt + out}

    def _reasoning_tokens(self, reply):
        """The generated tokens up to and with the one closing the think block (all of them if it never closed)."""
        if not reply.get("reasoning_content"):
            return 0
        ids = self.gen.token_ids
        return ids.index(self.close_id) + 1 if self.close_id in ids else len(ids)

    def _item(self, kind, text, status, logprobs=()):
        prefix = "rs" if kind == "reasoning" else "msg"
        item = {"type": kind, "id": _id(prefix), "summary": []} if kind == "reasoning" else {
            "type": kind, "id": _id(prefix), "status": status, "role": "assistant"}
        return dict(item, content=[_part(kind, text, logprobs)])

    def whole(self):
        """The non-streamed response (the generation runs to its end here)."""
        reply, status = self.choice.message(), self.status()
        items = [self._item("reasoning", reply["reasoning_content"], status)] if reply.get("reasoning_content") else []
        if reply.get("content") or not reply.get("tool_calls"):
            scores = self.choice.logprobs(True)
            items.append(self._item("message", reply.get("content") or "", status, scores["content"] if scores else ()))
        items += [_function_call(call) for call in reply.get("tool_calls") or ()]
        return self._kept(self.response(status, items, self.usage(reply)))

    def input_items(self):
        return responses_fields.listed(self.values["input"])

    def _kept(self, body):
        """`body`, stored when the request asked it (store, true by default); its store field says if it was. A
        background response settles its stored queued object (unless it was cancelled meanwhile); a streamed one
        is settled by its writer, with the event that carries it (responses_background)."""
        if self.store is not None:
            try:
                if self.background:
                    if not self.values.get("stream"):
                        self.store.settle(self.id, body)  # False: it was cancelled meanwhile, and stays so
                    body["store"] = True
                else:
                    body["store"] = self.store.put(self.id, self.values.get("previous_response_id"), body,
                                                   self.input_items())
            except StoreUnavailable:
                body["store"] = False  # the answer still reaches the client; its store field says it was not kept
        return body

    def events(self):
        """response.created and .in_progress (a background one: created queued, .queued, and .in_progress before
        the answer's first event); reasoning and message items as their text comes, function calls whole at the
        end; response.completed or .incomplete; response.failed if the die fails."""
        try:
            yield self._event("response.created", response=self.response("queued" if self.background else
                                                                           "in_progress", []))
            if self.background:
                yield self._event("response.queued", response=self.response("queued", []))
            else:
                yield from self._progress()
            yield from self._deltas(self.choice.deltas())
            if self.gen.finish_reason != "abort":
                yield from self._ending()
        except BackendError as exc:  # the status line is gone: the response fails in-band
            self.gen.cancel()
            yield self._event("response.failed", response=self.response("failed", self.items, error={
                "code": exc.code, "message": str(exc)}))

    def _progress(self):
        """response.in_progress, once: at once, or for a background response before the answer's first event
        (until then it waited for a batch place and its prefill)."""
        if not self.begun:
            self.begun = True
            yield self._event("response.in_progress", response=self.response("in_progress", []))

    def _ending(self):
        """After the text: the open item closed (an empty reply is still a message), the function calls, the
        final status event."""
        yield from self._progress()
        reply = self.choice.output.message()
        if not reply.get("tool_calls") and not any(i["type"] == "message" for i in self.items) \
                and (self.open or {}).get("type") != "message":
            yield from self._start("message")
        yield from self._close()
        for call in reply.get("tool_calls") or ():
            yield from self._call(_function_call(call))
        status = self.status()
        final = self._kept(self.response(status, self.items, self.usage(reply)))
        yield self._event(f"response.{status}", response=final)

    def _event(self, kind, **body):
        self.seq += 1
        return sse.named(kind, dict(type=kind, sequence_number=self.seq - 1, **body))

    def _deltas(self, deltas):
        for delta in deltas:
            yield from self._progress()
            for key, kind in (("reasoning_content", "reasoning"), ("content", "message")):
                if delta.get(key):
                    yield from self._start(kind)
                    self.text += delta[key]
                    extra = {"logprobs": self._new_scores()} if kind == "message" else {}
                    yield self._event(PARTS[kind][1], item_id=self.open["id"], output_index=len(self.items),
                                      content_index=0, delta=delta[key], **extra)

    def _new_scores(self):
        scores = self.choice.new_logprobs(True)
        self.scores += scores["content"] if scores else []
        return scores["content"] if scores else []

    def _start(self, kind):
        if self.open is not None and self.open["type"] == kind:
            return
        yield from self._close()
        self.open, self.text, self.scores = self._item(kind, "", "in_progress"), "", []
        where = {"item_id": self.open["id"], "output_index": len(self.items)}
        yield self._event("response.output_item.added", output_index=len(self.items), item=dict(self.open, content=[]))
        yield self._event("response.content_part.added", **where, content_index=0, part=_part(kind, ""))

    def _close(self):
        if self.open is None:
            return
        kind, where = self.open["type"], {"item_id": self.open["id"], "output_index": len(self.items)}
        part = _part(kind, self.text, self.scores)
        extra = {"logprobs": part["logprobs"]} if kind == "message" else {}
        yield self._event(PARTS[kind][2], **where, content_index=0, text=self.text, **extra)
        yield self._event("response.content_part.done", **where, content_index=0, part=part)
        item = dict(self.open, content=[part], **({"status": self.status()} if kind == "message" else {}))
        yield self._event("response.output_item.done", output_index=len(self.items), item=item)
        self.items.append(item)
        self.open = None

    def _call(self, item):
        where = {"item_id": item["id"], "output_index": len(self.items)}
        yield self._event("response.output_item.added", output_index=len(self.items),
                          item=dict(item, arguments="", status="in_progress"))
        yield self._event("response.function_call_arguments.delta", **where, delta=item["arguments"])
        yield self._event("response.function_call_arguments.done", **where, name=item["name"],
                          arguments=item["arguments"])
        yield self._event("response.output_item.done", output_index=len(self.items), item=item)
        self.items.append(item)


class _Route(RestatedChat):
    """What both routes share: the input items, after those of the stored responses they continue, restated as a
    chat request."""

    schema, required = responses_fields.COUNT, ("input",)

    def prepared(self, req):
        """With truncation auto, the conversation's oldest turns dropped until it fits with max_output_tokens."""
        served, values, parsed, prefill = super().prepared(req)
        if values.get("truncation") == "auto":
            parsed = responses_truncation.fitted(served, parsed, values.get("max_output_tokens") or 1)
        return served, values, parsed, prefill

    def restate(self, values):
        previous = values.get("previous_response_id")
        if previous is not None:
            values = dict(values, history=_continued(self.options.responses, previous))
        return responses_fields.parsed(values), ""


def _continued(store, previous):
    """The items of the stored chain ending with response `previous` (its instructions are not carried over)."""
    if store is None:
        raise bad("previous_response_id", responses_fields.STATELESS, "unsupported_value")
    try:
        if store.pending(previous):
            raise bad("previous_response_id", f"response {show(previous)} is a background response still being "
                      "generated: continue it once its status is completed", "invalid_value")
        return store.conversation(previous)
    except MissingResponse as exc:
        raise RequestError(f"previous_response_id: {exc}", param="previous_response_id",
                           code="previous_response_not_found", status=404) from None
    except StoreUnavailable as exc:
        raise RequestError(str(exc), code="store_unavailable", status=503, type="server_error") from None


class Responses(_Route):
    """POST /v1/responses: a chat turn answered as a Responses object, or streamed as its events."""

    schema = responses_fields.RESPONSES

    def restate(self, values):
        responses_background.check(values, self.options.responses)
        return super().restate(values)

    def reply(self, served, choice, n_prompt, values):
        return _Reply(served, choice, values, self.options.responses)

    def answer(self, resp, parsed, choice, reply):
        """A background response is answered at once, queued, and generated in a thread."""
        if reply.background and parsed.stream:
            resp.content_type = sse.CONTENT_TYPE
            resp.set_headers(sse.HEADERS)
            resp.stream = SseBody(responses_background.start(reply), keepalive=self.options.keepalive)
        elif reply.background:
            resp.media = responses_background.start(reply)
        else:
            super().answer(resp, parsed, choice, reply)

    def answered(self, resp, reply):
        """The id a stored response is kept under, for `pantheon router` to pin to this instance."""
        if reply.store is not None:
            resp.set_header(RESPONSE_ID_HEADER, reply.id)


class InputTokens(_Route):
    """POST /v1/responses/input_tokens: the input's token count, as the model's template renders it."""

    def on_post(self, req, resp):
        served, _, parsed, _ = self.prepared(req)
        resp.media = {"object": "response.input_tokens", "input_tokens": chat_plan.prompt_tokens(served, parsed)}


class Stored:
    """GET and DELETE /v1/responses/{id}, GET its input_items, POST its cancel: the responses made with store
    true (the default), while the store's byte bound keeps them; without a store every id is a 404 saying so."""

    def __init__(self, store, keepalive=0.0):
        self.store, self.keepalive = store, keepalive

    def on_get(self, req, resp, response_id):
        """The stored object; with stream=true, a streamed background response's events after starting_after."""
        after = responses_background.resumed(req.params)
        if after is None:
            resp.media = self._ask(response_id, "get")
            return
        if not self._ask(response_id, "streamed"):
            raise RequestError(f"response {show(response_id)} was not created as a streamed background response: "
                               "read it without stream", param="stream", code="not_streamed")
        resp.content_type = sse.CONTENT_TYPE
        resp.set_headers(sse.HEADERS)
        resp.stream = SseBody(responses_background.tail(self.store, response_id, after), keepalive=self.keepalive)

    def on_delete(self, req, resp, response_id):
        self._ask(response_id, "delete")
        responses_background.stop_here(response_id)
        resp.media = {"id": response_id, "object": "response.deleted", "deleted": True}

    def on_get_items(self, req, resp, response_id):
        items = self._ask(response_id, "input_items")
        resp.media = responses_fields.item_page(items, req.params)

    def on_post_cancel(self, req, resp, response_id):
        """A pending background response becomes cancelled (one already settled is answered as it stands)."""
        body = self._ask(response_id, "cancel")
        if not body.get("background"):
            raise RequestError(f"response {show(response_id)} cannot be cancelled: only background responses can be",
                               param="response_id", code="not_background")
        responses_background.stop_here(response_id)
        resp.media = body

    def _ask(self, response_id, method, *args):
        """The store's `method` of the id; its failures as the HTTP errors OpenAI's clients expect."""
        if self.store is None:
            raise RequestError(f"response {show(response_id)} not found: {responses_fields.STATELESS}",
                               param="response_id", code="not_found", status=404)
        try:
            return getattr(self.store, method)(response_id, *args)
        except MissingResponse as exc:
            raise RequestError(str(exc), param="response_id", code="not_found", status=404) from None
        except StoreUnavailable as exc:
            raise RequestError(str(exc), code="store_unavailable", status=503, type="server_error") from None
