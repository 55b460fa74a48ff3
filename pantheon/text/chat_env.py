"""The sandboxed Jinja environment that chat templates run in, with Hugging Face's globals and filters."""

import datetime
import functools
import json
from typing import NamedTuple

import jinja2
import jinja2.ext
import jinja2.meta
from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedEnvironment

from pantheon.errors import TemplateError

# Kimi-K2 templates queue tool-call ids with list.append/pop; render() hands templates deep copies,
# so letting lists grow or shrink cannot reach the caller's data.
_LIST_MUTATORS = frozenset({"append", "pop", "extend", "insert"})


def raise_exception(message):
    """The template refuses its input: surface its own words as our typed error."""
    raise TemplateError(str(message))


def strftime_now(fmt):
    return datetime.datetime.now().strftime(fmt)


def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    """HF's tojson: no HTML escaping, non-ASCII kept, json.dumps layout options exposed."""
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent,
                      separators=separators, sort_keys=sort_keys, default=_json_default)


def _json_default(value):
    """Lazy sequences (`tools | map(attribute='function')` is a generator) serialize as lists."""
    if isinstance(value, (str, bytes, dict)) or not hasattr(value, "__iter__"):
        raise TypeError(f"tojson: {type(value).__name__} is not JSON serializable")
    return list(value)


def from_json(text):
    """llama.cpp's extension used by DeepSeek templates to parse tool-call arguments given as text."""
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except ValueError as exc:
        raise TemplateError(f"from_json: invalid JSON {text[:80]!r}: {exc}") from None


class GenerationExtension(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}` marks assistant tokens for training masks; we just render it."""

    tags = {"generation"}

    def parse(self, parser):
        next(parser.stream)  # the `generation` name token
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


class ChatSandbox(ImmutableSandboxedEnvironment):
    """Immutable sandbox, except that lists built or copied for the template may grow and shrink."""

    def is_safe_attribute(self, obj, attr, value):
        if isinstance(obj, list) and attr in _LIST_MUTATORS:
            return SandboxedEnvironment.is_safe_attribute(self, obj, attr, value)
        return super().is_safe_attribute(obj, attr, value)


@functools.lru_cache(maxsize=1)
def environment():
    """One shared environment, built on first use (HF settings: trim_blocks, lstrip_blocks)."""
    env = ChatSandbox(trim_blocks=True, lstrip_blocks=True,
                      extensions=[GenerationExtension, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.filters["from_json"] = from_json
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


class Compiled(NamedTuple):
    template: jinja2.Template
    variables: frozenset  # names the template reads from its context (jinja2.meta's undeclared set)


@functools.lru_cache(maxsize=64)
def compile_template(source):
    """Compile once per distinct source text; a syntax error names the line."""
    env = environment()
    try:
        ast = env.parse(source)
    except jinja2.TemplateSyntaxError as exc:
        raise TemplateError(f"chat template syntax error at line {exc.lineno}: {exc.message}") from None
    variables = frozenset(jinja2.meta.find_undeclared_variables(ast))
    return Compiled(env.from_string(ast), variables)
