"""Chat templates by name (llama-server's `--chat-template NAME`), written as Jinja for our renderer."""

from pantheon.text.chat import DEFAULT_TEMPLATE

_TEXT = ("{%- set text = message['content'] if message['content'] is string else "
         "(message['content'] or []) | map(attribute='text') | join('') -%}")

NAMED = {
    "chatml": DEFAULT_TEMPLATE,
    "llama3": (
        "{{- bos_token -}}{%- for message in messages -%}" + _TEXT +
        "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + text | trim + '<|eot_id|>' -}}"
        "{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}{%- endif -%}"),
    "llama2": (
        "{%- set ns = namespace(system='') -%}{%- for message in messages -%}" + _TEXT +
        "{%- if message['role'] == 'system' -%}{%- set ns.system = '<<SYS>>\\n' + text + '\\n<</SYS>>\\n\\n' -%}"
        "{%- elif message['role'] == 'user' -%}{{- bos_token + '[INST] ' + ns.system + text + ' [/INST]' -}}"
        "{%- set ns.system = '' -%}{%- else -%}{{- ' ' + text + ' ' + eos_token -}}{%- endif -%}{%- endfor -%}"),
    "mistral": (
        "{%- set ns = namespace(system='') -%}{{- bos_token -}}{%- for message in messages -%}" + _TEXT +
        "{%- if message['role'] == 'system' -%}{%- set ns.system = text + '\\n\\n' -%}"
        "{%- elif message['role'] == 'user' -%}{{- '[INST] ' + ns.system + text + '[/INST]' -}}{%- set ns.system = '' -%}"
        "{%- else -%}{{- text + eos_token -}}{%- endif -%}{%- endfor -%}"),
    "gemma": (
        "{{- bos_token -}}{%- for message in messages -%}" + _TEXT +
        "{%- set role = 'model' if message['role'] == 'assistant' else 'user' -%}"
        "{{- '<start_of_turn>' + role + '\\n' + text | trim + '<end_of_turn>\\n' -}}{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{- '<start_of_turn>model\\n' -}}{%- endif -%}"),
    "phi3": (
        "{%- for message in messages -%}" + _TEXT +
        "{{- '<|' + message['role'] + '|>\\n' + text + '<|end|>\\n' -}}{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{- '<|assistant|>\\n' -}}{%- endif -%}"),
    "zephyr": (
        "{%- for message in messages -%}" + _TEXT +
        "{{- '<|' + message['role'] + '|>\\n' + text + eos_token + '\\n' -}}{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{- '<|assistant|>\\n' -}}{%- endif -%}"),
}
