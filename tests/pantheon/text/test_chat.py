"""Chat templates: every shipped template renders, special tokens and system merging behave as HF's do."""

import json

import pytest

from pantheon.text.chat import DEFAULT_TEMPLATE, ChatTemplate, merge_system
from pantheon.text.chat_env import compile_template
from pantheon.errors import PantheonError, TemplateError
from tests.conftest import SHARED, shared_path

SYSTEM, FIRST, REPLY, LAST = "You are terse.", "Hi there", "Hello!", "What is 2+2?"
CONVERSATION = [
    {"role": "system", "content": SYSTEM},
    {"role": "user", "content": FIRST},
    {"role": "assistant", "content": REPLY},
    {"role": "user", "content": LAST},
]
TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city",
        "parameters": {"type": "object", "required": ["city"],
                       "properties": {"city": {"type": "string", "description": "City name"}}},
    },
}]
TEMPLATE_NAMES = sorted(p.name for p in (SHARED / "templates").glob("*.jinja"))


def load(name, bos="<BOS>", eos="<EOS>"):
    return ChatTemplate(shared_path("templates", name).read_text(), bos_token=bos, eos_token=eos)


@pytest.mark.parametrize("name", TEMPLATE_NAMES)
def test_every_template_renders_the_conversation(name):
    out = load(name).render(CONVERSATION, add_generation_prompt=True)
    for text in (SYSTEM, FIRST, REPLY, LAST):
        assert text in out, f"{name} dropped {text!r}"
    assert out.index(FIRST) < out.index(REPLY) < out.index(LAST)


@pytest.mark.parametrize("name", TEMPLATE_NAMES)
def test_every_template_renders_with_tools(name):
    template = load(name)
    out = template.render(CONVERSATION, add_generation_prompt=True, tools=TOOLS)
    assert LAST in out
    reads_tools = {"tools", "functions"} & compile_template(template.source).variables
    if reads_tools:
        assert "get_weather" in out, f"{name} reads {reads_tools} but did not list the tool"


def test_qwen25_is_chatml_with_generation_prompt():
    out = load("Qwen-Qwen2.5-7B-Instruct.jinja").render(CONVERSATION)
    assert out == (
        f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{FIRST}<|im_end|>\n"
        f"<|im_start|>assistant\n{REPLY}<|im_end|>\n<|im_start|>user\n{LAST}<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_qwen25_without_generation_prompt_ends_at_last_turn():
    out = load("Qwen-Qwen2.5-7B-Instruct.jinja").render(CONVERSATION, add_generation_prompt=False)
    assert out.endswith(f"<|im_start|>user\n{LAST}<|im_end|>\n")


def test_qwen25_tools_block_is_hf_tojson():
    out = load("Qwen-Qwen2.5-7B-Instruct.jinja").render(CONVERSATION, tools=TOOLS)
    assert f"<tools>\n{json.dumps(TOOLS[0], ensure_ascii=False)}\n</tools>" in out
    assert out.startswith(f"<|im_start|>system\n{SYSTEM}\n\n# Tools")


def test_llama31_header_layout_and_bos():
    out = load("meta-llama-Llama-3.1-8B-Instruct.jinja", bos="<|begin_of_text|>").render(CONVERSATION)
    assert out.startswith("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n")
    assert f"<|start_header_id|>user<|end_header_id|>\n\n{LAST}<|eot_id|>" in out
    assert out.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")


def test_gemma2_rejects_system_so_it_is_merged_into_first_user_turn():
    template = load("google-gemma-2-2b-it.jinja", bos="<bos>")
    with pytest.raises(TemplateError, match="System role not supported"):
        template._render(CONVERSATION, True, None, {})
    out = template.render(CONVERSATION)
    assert out.startswith(f"<bos><start_of_turn>user\n{SYSTEM}\n\n{FIRST}<end_of_turn>\n")
    assert out.endswith("<start_of_turn>model\n")


def test_template_rejection_reaches_caller_with_its_own_message():
    source = shared_path("templates", "google-gemma-2-2b-it.jinja").read_text()
    message = "Conversation roles must alternate user/assistant/user/assistant/..."
    assert message in source
    with pytest.raises(TemplateError) as info:
        ChatTemplate(source).render([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
    assert str(info.value) == message
    assert isinstance(info.value, PantheonError)


def test_kimi_tool_queue_may_append_and_pop_without_touching_caller_data():
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "18C"},
    ]
    before = json.dumps(messages)
    out = load("Kimi-K2-Instruct.jinja").render(messages, tools=TOOLS)
    assert '<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": "Paris"}' in out
    assert "## Return of functions.get_weather:0\n18C" in out
    assert json.dumps(messages) == before


def test_command_r_plus_needs_parameter_descriptions():
    bare = [{"type": "function", "function": {"name": "f", "description": "d", "parameters": {
        "type": "object", "properties": {"x": {"type": "string"}}}}}]
    with pytest.raises(TemplateError, match="has no attribute 'description'"):
        load("CohereForAI-c4ai-command-r-plus-tool_use.jinja").render(CONVERSATION, tools=bare)


def test_firefunction_gets_functions_json_and_datetime_like_llama_cpp():
    out = load("fireworks-ai-llama-3-firefunction-v2.jinja").render(CONVERSATION, tools=TOOLS)
    assert json.dumps(TOOLS, indent=2) in out
    assert " GMT." in out


def test_missing_template_falls_back_to_chatml():
    template = ChatTemplate(None)
    assert template.is_default and template.source == DEFAULT_TEMPLATE
    parts = [{"type": "text", "text": "look: "}, {"type": "image_url", "image_url": {"url": "x"}},
             {"type": "text", "text": "cat"}]
    out = template.render([{"role": "user", "content": parts}])
    assert out == "<|im_start|>user\nlook: cat<|im_end|>\n<|im_start|>assistant\n"


def test_from_metadata_resolves_special_tokens():
    meta = {
        "tokenizer.chat_template": "{{ bos_token }}{{ messages[0]['content'] }}{{ eos_token }}",
        "tokenizer.ggml.tokens": ["<unk>", "<s>", "</s>", "hi"],
        "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2,
    }
    assert ChatTemplate.from_metadata(meta).render([{"role": "user", "content": "x"}]) == "<s>x</s>"
    custom = ChatTemplate.from_metadata(meta, tokenizer_token_text=lambda i: f"[{i}]")
    assert custom.render([{"role": "user", "content": "x"}]) == "[1]x[2]"


def test_from_metadata_without_template_or_tokens():
    template = ChatTemplate.from_metadata({})
    assert template.is_default and template.bos_token == "" and template.eos_token == ""


def test_hf_globals_and_filters():
    source = (
        "{{ {'k': 'é<>'} | tojson }}|{{ [1, 2] | tojson(indent=2) }}|"
        "{{ {'a': 1, 'b': 2} | tojson(separators=(',', ':')) }}|"
        "{% generation %}gen{% endgeneration %}|{{ strftime_now('%Y') | length }}|"
        "{% for i in range(5) %}{% if i == 2 %}{% break %}{% endif %}{{ i }}{% endfor %}|"
        "{{ '{\"x\": 1}' | from_json | tojson }}|{{ [1, 2] | map('string') | tojson }}"
    )
    out = ChatTemplate(source).render([])
    assert out == '{"k": "é<>"}|[\n  1,\n  2\n]|{"a":1,"b":2}|gen|4|01|{"x": 1}|["1", "2"]'


def test_raise_exception_is_typed():
    with pytest.raises(TemplateError, match="^nope$"):
        ChatTemplate("{{ raise_exception('nope') }}").render([])


def test_syntax_error_names_the_line():
    with pytest.raises(TemplateError, match="line 2"):
        ChatTemplate("ok\n{% if %}")


def test_sandbox_blocks_python_internals():
    with pytest.raises(TemplateError):
        ChatTemplate("{{ ''.__class__.__mro__[1].__subclasses__() }}").render([])


def test_sandbox_keeps_caller_dicts_immutable():
    with pytest.raises(TemplateError):
        ChatTemplate("{% set _ = messages[0].update({'role': 'x'}) %}").render([{"role": "user"}])


def test_compiled_once_per_source():
    source = "{{ messages | length }}"
    assert compile_template(source) is compile_template(source)
    assert ChatTemplate(source)._compiled is ChatTemplate(source)._compiled


def test_merge_system_variants():
    assert merge_system([{"role": "user", "content": "u"}]) is None
    assert merge_system([{"role": "system", "content": "s"}, {"role": "assistant", "content": "a"}]) == [
        {"role": "user", "content": "s"}, {"role": "assistant", "content": "a"}]
    parts = [{"type": "text", "text": "u"}]
    merged = merge_system([{"role": "system", "content": "s"}, {"role": "user", "content": parts}])
    assert merged == [{"role": "user", "content": [{"type": "text", "text": "s\n\n"}] + parts}]
