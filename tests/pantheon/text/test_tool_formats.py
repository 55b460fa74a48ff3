"""Tool-call parsing per template family, on what the real templates write for a call (whole and streamed)."""

import json
import random

import pytest

from pantheon.text import tool_formats as tf
from pantheon.text.chat import ChatTemplate
from pantheon.text.chat_output import ChatOutput
from pantheon.text.json_scan import NotJson, members, partial_string, value_end
from pantheon.text.prompting import PromptBuilder
from tests.conftest import shared_path

CALLS = [("get_weather", {"city": "Paris", "unit": "celsius", "days": [1, 2], "note": "quote \" and é"}),
         ("get_time", {})]
TOOLS = [{"type": "function", "function": {"name": n, "description": "d", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "description": "a city"}}}}} for n, _ in CALLS]
USER = [{"role": "user", "content": "What is the weather in Paris?"}]
ENDS = ("<|im_end|>", "<|eot_id|>", "<|eom_id|>", "</s>", "<EOS>")

FAMILIES = {
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja": tf.HERMES,
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja": tf.HERMES,
    "Qwen-Qwen2.5-7B-Instruct.jinja": tf.HERMES,
    "Qwen-Qwen3-0.6B.jinja": tf.HERMES,
    "meta-llama-Llama-3.1-8B-Instruct.jinja": tf.LLAMA3,
    "meta-llama-Llama-3.3-70B-Instruct.jinja": tf.LLAMA3,
    "mistralai-Mistral-Nemo-Instruct-2407.jinja": tf.MISTRAL,
    "Mistral-Small-3.2-24B-Instruct-2506.jinja": tf.MISTRAL_NAMED,
    "unsloth-mistral-Devstral-Small-2507.jinja": tf.MISTRAL_NAMED,
    "google-gemma-2-2b-it.jinja": tf.GENERIC,
}
# Llama 3.x templates write one call per assistant turn; the others write them all.
SINGLE = {tf.LLAMA3}


class _Tok:
    token_text = staticmethod(lambda i: "")
    bos_id = None


def template_reply(name, calls):
    """What the template itself writes for an assistant turn making `calls`: the text a model trained
    on it generates (the turn's end token cut off)."""
    source = shared_path("templates", name).read_text()
    builder = PromptBuilder(_Tok(), {}, template_source=source)
    builder.template = ChatTemplate(source, bos_token="<BOS>", eos_token="<EOS>")
    tool_calls = [{"id": f"abcdefgh{i}", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
                  for i, (n, a) in enumerate(calls)]
    head = builder.render(USER, TOOLS)
    full = builder.render(USER + [{"role": "assistant", "content": None, "tool_calls": tool_calls}], TOOLS,
                          add_generation_prompt=False)
    assert full.startswith(head), (head[-200:], full[-300:])
    reply = full[len(head):].rstrip()
    while any(reply.endswith(e) for e in ENDS):
        reply = next(reply[:-len(e)].rstrip() for e in ENDS if reply.endswith(e))
    return builder.tool_format, reply


def streamed(fmt, text, sizes):
    """Feed `text` in chunks of the given sizes (cycled); the deltas and the final message."""
    out, deltas, i, k = ChatOutput(fmt), [], 0, 0
    while i < len(text):
        n = sizes[k % len(sizes)]
        deltas += out.push(text[i:i + n])
        i, k = i + n, k + 1
    deltas += out.finish()
    return deltas, out.message()


def rebuild(deltas):
    """The message a client assembles from the deltas (as the openai SDK's stream helpers do)."""
    content, calls = "", {}
    for d in deltas:
        content += d.get("content", "")
        for c in d.get("tool_calls", ()):
            entry = calls.setdefault(c["index"], {"id": c.get("id"), "name": "", "arguments": ""})
            entry["name"] += c.get("function", {}).get("name", "")
            entry["arguments"] += c["function"].get("arguments", "")
    return content, [calls[i] for i in sorted(calls)]


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_the_template_names_its_family(name):
    assert tf.detect(shared_path("templates", name).read_text()) == FAMILIES[name]


@pytest.mark.parametrize("name", sorted(n for n, f in FAMILIES.items() if f != tf.GENERIC))
def test_calls_written_by_the_template_parse_back_whole_and_streamed(name):
    fmt, reply = template_reply(name, CALLS[:1] if FAMILIES[name] in SINGLE else CALLS)
    assert fmt == FAMILIES[name]
    want = CALLS[:1] if fmt in SINGLE else CALLS
    whole = tf.parse(fmt, reply, final=True)
    assert [(c.name, json.loads(c.arguments)) for c in whole.calls] == want, reply
    assert whole.content.replace("<think>", "").replace("</think>", "").strip() == ""  # Qwen3 writes an empty think
    rng = random.Random(name)
    for sizes in ([1], [2], [3, 1, 7], [rng.randint(1, 9) for _ in range(20)], [len(reply)]):
        deltas, message = streamed(fmt, reply, sizes)
        content, calls = rebuild(deltas)
        assert content == "" and message["content"] is None and not message.get("reasoning_content")
        assert [(c["name"], json.loads(c["arguments"])) for c in calls] == want
        assert [c["id"] for c in calls] == [c["id"] for c in message["tool_calls"]]
        assert [c["arguments"] for c in calls] == [c["function"]["arguments"] for c in message["tool_calls"]]


@pytest.mark.parametrize("fmt,text", [
    (tf.HERMES, 'Sure.\n<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>'),
    (tf.MISTRAL_NAMED, 'Sure.[TOOL_CALLS]get_time[ARGS]{}'),
    (tf.MISTRAL, 'Sure.[TOOL_CALLS][{"name": "get_time", "arguments": {}}]'),
])
def test_text_before_the_call_is_content(fmt, text):
    for sizes in ([1], [4], [len(text)]):
        deltas, message = streamed(fmt, text, sizes)
        assert rebuild(deltas)[0] == "Sure." == message["content"]
        assert message["tool_calls"][0]["function"] == {"name": "get_time", "arguments": "{}"}


@pytest.mark.parametrize("text", [
    '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "call1"}, '
    '{"name": "get_time", "arguments": {}, "id": "call2"}]}',
    '{"tool_call": {"name": "get_weather", "arguments": {"city": "Paris"}}}',
])
def test_generic_json_calls(text):
    for sizes in ([1], [5], [len(text)]):
        deltas, message = streamed(tf.GENERIC, text, sizes)
        names = [c["function"]["name"] for c in message["tool_calls"]]
        assert names[0] == "get_weather" and json.loads(message["tool_calls"][0]["function"]["arguments"]) == {
            "city": "Paris"}
        assert [c["name"] for c in rebuild(deltas)[1]] == names


def test_generic_response_streams_as_content():
    text = '{"response": "Hello, \\"world\\" \\u00e9\\ud83d\\ude00!"}'
    for sizes in ([1], [2], [len(text)]):
        deltas, message = streamed(tf.GENERIC, text, sizes)
        assert rebuild(deltas)[0] == 'Hello, "world" é😀!' == message["content"]
        assert "tool_calls" not in message


@pytest.mark.parametrize("fmt,text", [
    (tf.HERMES, "No tools needed: 2 < 3 and <tool_call> is only text here."),
    (tf.LLAMA3, '{"answer": 42}'), (tf.LLAMA3, "The answer is 42."), (tf.GENERIC, "plain words"),
    (tf.MISTRAL, "a [TOOL_ reference"),
])
def test_text_that_is_no_call_stays_content(fmt, text):
    for sizes in ([1], [3], [len(text)]):
        deltas, message = streamed(fmt, text, sizes)
        assert rebuild(deltas)[0] == text.strip() == message["content"] and "tool_calls" not in message


def test_a_call_cut_by_the_length_limit_keeps_its_partial_arguments():
    text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par'
    deltas, message = streamed(tf.HERMES, text, [2])
    assert message["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": '{"city": "Par'}
    assert rebuild(deltas)[1][0]["arguments"] == '{"city": "Par'


def test_parallel_off_keeps_the_first_call():
    text = '<tool_call>{"name": "a", "arguments": {}}</tool_call><tool_call>{"name": "b", "arguments": {}}</tool_call>'
    out = ChatOutput(tf.HERMES, parallel=False)
    out.push(text)
    out.finish()
    assert [c["function"]["name"] for c in out.message()["tool_calls"]] == ["a"]


def test_mistral_ids_are_nine_alphanumerics_and_openai_ids_are_call_ids():
    for fmt, check in ((tf.MISTRAL, lambda i: len(i) == 9 and i.isalnum()), (tf.HERMES, lambda i: i.startswith("call_"))):
        out = ChatOutput(fmt)
        out.push(tf.opener(fmt, "get_time") + "{}" + ("}]" if fmt == tf.MISTRAL else "}</tool_call>"))
        out.finish()
        assert check(out.message()["tool_calls"][0]["id"])


@pytest.mark.parametrize("fmt", [tf.HERMES, tf.LLAMA3, tf.MISTRAL, tf.MISTRAL_NAMED, tf.GENERIC])
def test_a_forced_opener_plus_arguments_parses_as_that_call(fmt):
    close = {tf.HERMES: "}\n</tool_call>", tf.LLAMA3: "}", tf.MISTRAL: "}]", tf.MISTRAL_NAMED: "", tf.GENERIC: "}}"}
    out = ChatOutput(fmt, prefix=tf.opener(fmt, "get_weather"))
    deltas = out.push('{"city": "Oslo"}' + close[fmt]) + out.finish()
    assert out.message()["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": '{"city": "Oslo"}'}
    assert "content" not in str([d for d in deltas if "content" in d and d["content"]])


def test_reasoning_is_split_whole_and_streamed_and_none_keeps_it():
    text = "<think>\nLet me think: 2+2.\n</think>\n\nIt is 4."
    for sizes in ([1], [3], [len(text)]):
        out, deltas = ChatOutput(), []
        for i in range(0, len(text), sizes[0]):
            deltas += out.push(text[i:i + sizes[0]])
        deltas += out.finish()
        assert "".join(d.get("reasoning_content", "") for d in deltas) == "Let me think: 2+2."
        assert "".join(d.get("content", "") for d in deltas) == "It is 4."
        assert out.message() == {"role": "assistant", "content": "It is 4.", "reasoning_content": "Let me think: 2+2."}
    kept = ChatOutput(split_reasoning=False)
    assert kept.push(text) + kept.finish() == [{"content": text}]
    opened = ChatOutput(thinking=True)
    opened.push("still thinking</think>Done")
    opened.finish()
    assert opened.message() == {"role": "assistant", "content": "Done", "reasoning_content": "still thinking"}


def test_plain_text_passes_through_unchanged():
    text = "  <b>bold</b> and < angle\n"
    out = ChatOutput()
    deltas = [d for ch in text for d in out.push(ch)] + out.finish()
    assert "".join(d["content"] for d in deltas) == text == out.message()["content"]


def test_json_scan_partial_values():
    assert value_end('{"a": [1, "}"]} tail', 0) == 15 and value_end('{"a": [1, "}"', 0) is None
    assert value_end("12", 0) is None and value_end("12,", 0) == 2 and value_end("tru", 0) is None
    with pytest.raises(NotJson):
        value_end("nope", 0)
    assert partial_string('"ab\\u00', 0) == ("ab", False)
    found, end = members('{"name": "f", "arguments": {"x": 1', 0)
    assert [k for k, _, _ in found] == ["name", "arguments"] and end is None and found[1][2] is None


def test_history_arguments_become_objects_only_for_templates_that_want_them():
    for name in ("Qwen-Qwen2.5-7B-Instruct.jinja", "meta-llama-Llama-3.1-8B-Instruct.jinja"):
        builder = PromptBuilder(_Tok(), {}, template_source=shared_path("templates", name).read_text())
        assert builder.object_args
        call = {"id": "abcdefgh1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}
        text = builder.render(USER + [{"role": "assistant", "content": None, "tool_calls": [call]}], TOOLS)
        assert '"x": 1' in text and '\\"x\\"' not in text
