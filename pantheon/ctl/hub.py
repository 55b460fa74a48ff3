"""Where `pantheon-ctl pull` gets a model: a HuggingFace repo (metadata API, ranged header reads,
resumable checksummed downloads through huggingface_hub), a plain URL, or a local path."""

import hashlib
import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Optional

from pantheon.errors import PantheonError, TruncatedFile, UsageError
from pantheon.gguf.file import read_layout

DEFAULT_ENDPOINT = "https://huggingface.co"
FIRST_READ = 256 << 10        # bytes of a GGUF read first; doubled while the header goes on
MAX_HEADER = 64 << 20         # a 256k vocabulary with merges is ~10 MiB; beyond this we stop reading
SMALL_FILE = 4 << 20          # config.json and friends are read whole
PART_SUFFIX = ".part"
_REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}")
_SPLIT = re.compile(r"-\d{5}-of-\d{5}\.gguf$", re.IGNORECASE)
# the quant preferred when a repo offers several GGUFs and none is named (llama.cpp's usual default)
PREFERRED_QUANTS = ("Q4_K_M", "Q4_K_S", "Q5_K_M", "Q6_K", "Q8_0", "Q4_0", "F16", "BF16", "F32")


class HubError(PantheonError):
    """The hub, URL or file could not be read; the message names what and why."""


@dataclass(frozen=True)
class Source:
    """What SOURCE names: kind 'hub' (repo, revision, file or quant tag), 'url' or 'local'."""

    kind: str
    text: str
    repo: Optional[str] = None
    revision: Optional[str] = None
    file: Optional[str] = None
    tag: Optional[str] = None
    url: Optional[str] = None
    path: Optional[str] = None


@dataclass(frozen=True)
class RemoteFile:
    """One file of a repo as the metadata API lists it; `sha256` only for LFS files."""

    name: str
    size: Optional[int]
    sha256: Optional[str] = None
    url: Optional[str] = None


@dataclass(frozen=True)
class Listing:
    """A repo at one revision: its files by name, and the commit the revision resolved to."""

    repo: str
    revision: str
    commit: Optional[str]
    files: dict = field(default_factory=dict)


def parse_source(text, endpoint=DEFAULT_ENDPOINT, exists=os.path.exists):
    """Source from `owner/name[@revision][:FILE.gguf|:QUANT]`, an http(s) URL, or an existing path."""
    if text.startswith(("http://", "https://")):
        return _from_url(text, endpoint)
    if exists(text) or text.startswith(("/", "./", "../", "~")):
        return Source("local", text, path=os.path.expanduser(text))
    repo, _, pick = text.partition(":")
    repo, _, revision = repo.partition("@")
    if not _REPO.fullmatch(repo) or ".." in repo:
        raise UsageError(f"SOURCE {text!r}: expected OWNER/NAME[@REVISION][:FILE.gguf|:QUANT], a URL or a path")
    if pick.lower().endswith(".gguf"):
        return Source("hub", text, repo=repo, revision=revision or "main", file=pick)
    return Source("hub", text, repo=repo, revision=revision or "main", tag=pick or None)


def _from_url(text, endpoint):
    """A hub URL (https://HOST/OWNER/NAME[/resolve|blob/REV/FILE]) becomes a hub source."""
    parts, hub = urllib.parse.urlsplit(text), urllib.parse.urlsplit(endpoint)
    segments = [urllib.parse.unquote(s) for s in parts.path.strip("/").split("/")]
    if parts.netloc not in (hub.netloc, "huggingface.co") or len(segments) < 2:
        return Source("url", text, url=text, file=segments[-1] if segments else None)
    repo = "/".join(segments[:2])
    if len(segments) >= 5 and segments[2] in ("resolve", "blob"):
        return Source("hub", text, repo=repo, revision=segments[3], file="/".join(segments[4:]))
    return Source("hub", text, repo=repo, revision="main")


def is_split(name):
    return bool(_SPLIT.search(name))


def choose_gguf(listing, source):
    """The GGUF file the source names, or the preferred quant; UsageError listing the choices."""
    ggufs = sorted(n for n in listing.files if n.lower().endswith(".gguf") and "mmproj" not in n.lower())
    if source.file:
        if source.file not in listing.files:
            raise UsageError(f"{source.repo}: no file {source.file!r} at {listing.revision} (GGUF files: "
                             f"{', '.join(ggufs) or 'none'})")
        return source.file
    tags = [source.tag] if source.tag else PREFERRED_QUANTS
    for tag in tags:
        found = [n for n in ggufs if re.search(rf"(^|[-_.]){re.escape(tag)}([-_.]|$)", n, re.IGNORECASE)]
        if found:
            return found[0]
    if len(ggufs) == 1 and not source.tag:
        return ggufs[0]
    return None


# ---- the hub's metadata API


def list_repo(source, endpoint, token=None):
    """The repo's files with sizes and LFS checksums (GET /api/models/REPO/revision/REV?blobs=true)."""
    from huggingface_hub import HfApi
    from huggingface_hub.utils import HfHubHTTPError

    try:
        info = HfApi(endpoint=endpoint, token=token).model_info(source.repo, revision=source.revision,
                                                                files_metadata=True)
    except HfHubHTTPError as e:
        raise HubError(f"{endpoint}: {source.repo}@{source.revision}: {_first_line(e)}") from None
    except (OSError, ValueError) as e:
        raise HubError(f"{endpoint}: cannot reach the hub for {source.repo}: {_first_line(e)}") from None
    files = {}
    for s in info.siblings or ():
        size = s.lfs.size if s.lfs else s.size
        files[s.rfilename] = RemoteFile(s.rfilename, size, s.lfs.sha256 if s.lfs else None,
                                        file_url(endpoint, source.repo, info.sha or source.revision, s.rfilename))
    return Listing(source.repo, source.revision, info.sha, files)


def file_url(endpoint, repo, revision, name):
    from huggingface_hub import hf_hub_url

    return hf_hub_url(repo, name, revision=revision, endpoint=endpoint)


def _first_line(e):
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


# ---- reading without downloading


def read_bytes(url, length, headers=None, offset=0):
    """Up to `length` bytes from `offset` by an HTTP range request (redirects followed); a server that
    ignores Range answers 200 and we stop reading after `length` bytes."""
    req = urllib.request.Request(url, headers={**_auth(headers), "Range": f"bytes={offset}-{offset + length - 1}"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            if r.status == 200 and offset:
                r.read(offset)
            return r.read(length)
    except urllib.error.HTTPError as e:
        raise HubError(f"{_redact(url)}: HTTP {e.code} {e.reason}") from None
    except (urllib.error.URLError, OSError) as e:
        raise HubError(f"{_redact(url)}: {getattr(e, 'reason', e)}") from None


def remote_size(url, headers=None):
    """Content length of `url` from a HEAD request (redirects followed), or None."""
    req = urllib.request.Request(url, method="HEAD", headers=_auth(headers))
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            size = r.headers.get("X-Linked-Size") or r.headers.get("Content-Length")
            return int(size) if size and size.isascii() and size.isdigit() else None  # "²".isdigit()
    except urllib.error.HTTPError as e:
        raise HubError(f"{_redact(url)}: HTTP {e.code} {e.reason}") from None
    except (urllib.error.URLError, OSError) as e:
        raise HubError(f"{_redact(url)}: {getattr(e, 'reason', e)}") from None


def read_json(url, headers=None):
    try:
        return json.loads(read_bytes(url, SMALL_FILE, headers))
    except (ValueError, UnicodeDecodeError) as e:
        raise HubError(f"{_redact(url)}: not JSON ({e})") from None


def read_gguf_header(read, size, name):
    """(GGUFLayout or None, bytes fetched): the header only, through `read(offset, length)` in
    doubling ranges, never the weights; None when the header runs past MAX_HEADER or the file."""
    head, want = b"", min(FIRST_READ, size)
    while True:
        head += read(len(head), want - len(head))
        try:
            return read_layout(head, name, size), len(head)
        except TruncatedFile:
            if len(head) >= min(size, MAX_HEADER) or len(head) < want:
                return None, len(head)
            want = min(2 * want, size, MAX_HEADER)


def url_reader(url, headers=None):
    return lambda offset, length: read_bytes(url, length, headers, offset)


def file_reader(path):
    def read(offset, length):
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read(length)
    return read


def _auth(headers):
    return {"User-Agent": "pantheon-ctl", **(headers or {})}


def _redact(url):
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit((parts.scheme, parts.hostname or "", parts.path, "", ""))


# ---- downloading


def download(url, dest, size, sha256=None, headers=None, progress=None):
    """Fetch `url` into `dest` through huggingface_hub's http_get (progress bar on stderr, retries
    that resume inside one call); a previous run's `dest.part` is resumed with a Range request.
    The sha256 (when the hub publishes one) is checked before `dest` appears. Returns bytes resumed."""
    from huggingface_hub.file_download import http_get

    part = dest + PART_SUFFIX
    os.makedirs(os.path.dirname(dest) or ".", exist_ok=True)
    resumed = os.path.getsize(part) if os.path.exists(part) else 0
    if size is not None and resumed > size:
        os.unlink(part)
        resumed = 0
    try:
        with open(part, "ab") as f:
            http_get(url, f, resume_size=resumed, headers=_auth(headers), expected_size=size,
                     displayed_filename=os.path.basename(dest), tqdm_class=_bar_class(progress))
    except Exception as e:  # huggingface_hub raises its own and httpx types; the part file stays for a resume
        raise HubError(f"download of {_redact(url)} stopped: {_first_line(e)} ({_part_size(part)} bytes kept "
                       f"in {part}; run pull again to resume)") from None
    _verify(part, size, sha256)
    os.replace(part, dest)
    return resumed


def _bar_class(stream):
    """A tqdm bar on `stream` (default: stderr) that huggingface_hub's http_get drives; plain tqdm,
    not huggingface_hub's subclass, so that it also shows when stderr is not a terminal (logs, CI)."""
    from tqdm import tqdm

    class Bar(tqdm):
        def __init__(self, *args, **kwargs):
            kwargs.setdefault("file", stream)
            kwargs.setdefault("mininterval", 0.5)
            super().__init__(*args, **kwargs)

    return Bar


def _part_size(part):
    return os.path.getsize(part) if os.path.exists(part) else 0


def _verify(part, size, sha256):
    got = os.path.getsize(part)
    if size is not None and got != size:
        raise HubError(f"{part}: {got} bytes, the hub lists {size}; run pull again to resume")
    if sha256 is None:
        return
    digest = file_sha256(part)
    if digest != sha256.lower():
        os.unlink(part)
        raise HubError(f"checksum mismatch: sha256 {digest}, the hub lists {sha256}; the download was deleted")


def file_sha256(path, chunk=8 << 20):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)
    return h.hexdigest()
