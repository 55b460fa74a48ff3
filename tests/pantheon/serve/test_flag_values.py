"""Flag value parsers, called directly: each accepts its documented forms and refuses the rest by flag name."""

import pytest

from pantheon.errors import UsageError
from pantheon.serve import flag_values as fv


def refusal(parse, text, flag="--x"):
    with pytest.raises(UsageError) as e:
        parse(flag, text)
    assert str(e.value).startswith(flag)
    return str(e.value)


@pytest.mark.parametrize("text,value", [("0", 0), ("7", 7), ("0010", 10)])
def test_int_in_accepts_plain_decimals(text, value):
    assert fv.int_in(0, 10)("--x", text) == value


@pytest.mark.parametrize("text,why", [("-1", "negative"), ("+1", "whole number"), (" 1", "whole number"),
                                      ("0x1", "whole number"), ("1_0", "whole number"), ("11", "out of range"),
                                      ("", "whole number"), ("1" * 13, "whole number")])
def test_int_in_refuses(text, why):
    assert why in refusal(fv.int_in(0, 10), text)


@pytest.mark.parametrize("text", ["http://10.0.0.5:8000", "http://router.local:8000/", "http://[::1]:9"])
def test_url_keeps_the_base_without_its_slash(text):
    assert fv.parse_url("--registry", text) == text.rstrip("/")


@pytest.mark.parametrize("text", ["https://r:1", "http://", "http://r:1/api", "http://r:1/?a=1", "r:1", "ftp://r"])
def test_url_refuses_anything_but_a_plain_http_base(text):
    assert "expected http://HOST:PORT" in refusal(fv.parse_url, text, "--registry")


@pytest.mark.parametrize("text", ["10.0.0.5:8080", "[::1]:1", "host.example:65535"])
def test_address(text):
    assert fv.parse_address("--advertise", text) == text


@pytest.mark.parametrize("text", ["10.0.0.5", ":80", "h:0", "h:65536", "h:8o", "a b:80"])
def test_address_refused(text):
    assert "HOST:PORT" in refusal(fv.parse_address, text, "--advertise")


@pytest.mark.parametrize("text", ["*", "https://app.example:8443", "http://localhost", "http://[::1]:3000"])
def test_origin(text):
    assert fv.parse_origin("--cors-origin", text) == text


@pytest.mark.parametrize("text", ["https://app.example/", "app.example", "https://a.example:8443/x", "null", ""])
def test_origin_refused(text):
    assert "origin" in refusal(fv.parse_origin, text, "--cors-origin")


def test_secret_is_never_echoed():
    message = refusal(fv.parse_secret, "my secret key", "--api-key")
    assert "secret" not in message and "value not shown" in message


def test_model_path_counts_utf8_bytes():
    assert fv.parse_model_path("--model", "/" + "p" * 1023)
    assert "at most 1024 bytes" in refusal(fv.parse_model_path, "/" + "é" * 512, "--model")
    assert "file path" in refusal(fv.parse_model_path, "a\0b", "--model")


@pytest.mark.parametrize("text,names", [("0", ("cuda0",)), ("cuda1,0", ("cuda1", "cuda0")), ("cpu2", ("cpu2",)),
                                        (" cpu0 , cpu1 ", ("cpu0", "cpu1"))])
def test_dies_are_canonical(text, names):
    assert fv.parse_dies("--dies", text) == names


@pytest.mark.parametrize("text,why", [("0,cuda0", "named twice"), ("cpu0,1", "not both"), ("gpu0", "not a die"),
                                      ("0,", "empty entry"), (",".join(map(str, range(9))), "at most 8"),
                                      ("01", "not a die")])
def test_dies_refused(text, why):
    assert why in refusal(fv.parse_dies, text, "--dies")


def test_named_template_by_name_and_by_jinja():
    assert "<|im_start|>" in fv.named_template("chatml", jinja=False)
    source = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    assert fv.named_template(source, jinja=True) == source
    with pytest.raises(UsageError, match="expected one of"):
        fv.named_template(source, jinja=False)
    with pytest.raises(UsageError, match="not a usable chat template"):
        fv.named_template("{% for %}", jinja=True)


def test_key_file_skips_comments_and_blank_lines(tmp_path):
    path = tmp_path / "keys"
    path.write_text("# ops keys\n\n key-1 \nkey-2\n")
    assert fv.read_key_file("--api-key-file", str(path)) == ["key-1", "key-2"]
    path.write_text("# nothing\n")
    assert "no keys" in refusal(fv.read_key_file, str(path), "--api-key-file")
