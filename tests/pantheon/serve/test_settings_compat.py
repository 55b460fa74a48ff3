"""llama-server-compatible flags: --cors-origin, --reasoning-format, --chat-template[-file], --jinja."""

import pytest

from pantheon.errors import UsageError
from pantheon.serve.settings import parse_serve_args
from pantheon.text.named_templates import NAMED
from tests.conftest import shared_path


def test_cors_origins_and_reasoning_format():
    c = parse_serve_args(["--cors-origin", "https://a.example:8443", "--cors-origin", "http://[::1]:3000",
                          "--cors-origin", "https://a.example:8443", "--reasoning-format", "none"], {})
    assert c.cors_origins == ("https://a.example:8443", "http://[::1]:3000") and c.reasoning_format == "none"
    assert parse_serve_args([], {}).reasoning_format == "auto" and parse_serve_args([], {}).cors_origins == ()


@pytest.mark.parametrize("argv", [["--cors-origin", "ftp://x"], ["--cors-origin", "https://x/path"],
                                  ["--reasoning-format", "loud"], ["--model", "m", "--chat-template", "nope"],
                                  ["--model", "m", "--chat-template", "{{ messages }}"],
                                  ["--model", "m", "--chat-template", "{% if %}", "--jinja"],
                                  ["--model", "m", "--chat-template-file", "/no/such/file"],
                                  ["--model", "m", "--chat-template", "chatml", "--chat-template-file", "/x"],
                                  ["--chat-template", "chatml"]])
def test_bad_values_refuse_to_start(argv):
    with pytest.raises(UsageError):
        parse_serve_args(argv, {})


def test_chat_templates_by_name_file_and_text(tmp_path):
    qwen = shared_path("templates", "Qwen-Qwen2.5-7B-Instruct.jinja")
    c = parse_serve_args(["--model", "a", "--chat-template", "llama3", "--model", "b", "--chat-template-file",
                          str(qwen), "--model", "c", "--jinja", "--chat-template", "{{ messages[0]['content'] }}",
                          "--model", "d"], {})
    assert [m.chat_template for m in c.models] == [NAMED["llama3"], qwen.read_text(),
                                                   "{{ messages[0]['content'] }}", None]
    broken = tmp_path / "broken.jinja"
    broken.write_text("{% for %}")
    with pytest.raises(UsageError, match="not a usable chat template"):
        parse_serve_args(["--model", "a", "--chat-template-file", str(broken)], {})
