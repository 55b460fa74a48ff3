"""pantheon-ctl's flag values: each parser's accepted forms, bounds and refusals (naming flag and text)."""

import pytest

from pantheon.ctl import values
from pantheon.errors import UsageError


@pytest.mark.parametrize("text, value", [("1", 1), ("0.5", 0.5), ("86400", 86400), ("2.000001", 2.000001)])
def test_seconds(text, value):
    assert values.parse_seconds("--timeout", text) == value


@pytest.mark.parametrize("text, message", [
    ("0", "out of range"), ("86401", "out of range"), ("-1", "must not be negative"),
    ("1e3", "expected seconds"), ("", "expected seconds"), ("1.1234567", "expected seconds"),
])
def test_seconds_refused(text, message):
    with pytest.raises(UsageError, match=message) as e:
        values.parse_seconds("--timeout", text)
    assert str(e.value).startswith("--timeout")


@pytest.mark.parametrize("text, value", [("512", 512), ("2K", 2048), ("3MiB", 3 << 20), ("1gb", 1 << 30),
                                         ("4T", 4 << 40)])
def test_size(text, value):
    assert values.parse_size("--available", text) == value


@pytest.mark.parametrize("text", ["0", "0G", "iB", "1.5G", "-1", "1P", "G"])
def test_size_refused(text):
    with pytest.raises(UsageError, match="--available"):
        values.parse_size("--available", text)


@pytest.mark.parametrize("text, url", [("http://h:1/", "http://h:1"), ("https://[::1]/p/", "https://[::1]/p")])
def test_url(text, url):
    assert values.parse_url("--url", text) == url


@pytest.mark.parametrize("text", ["ftp://h", "h:80", "http://h:99999", "http://u:p@h", "http://h/#x"])
def test_url_refused(text):
    with pytest.raises(UsageError, match="--url"):
        values.parse_url("--url", text)


def test_token_file_takes_the_one_token_past_comments(tmp_path):
    f = tmp_path / "token"
    f.write_text("# admin\n\n  s3cret  \n")
    assert values.read_token_file("--token-file", str(f)) == "s3cret"
    f.write_text("a\nb\n")
    with pytest.raises(UsageError, match="expected one token in the file, found 2"):
        values.read_token_file("--token-file", str(f))
