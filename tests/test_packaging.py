"""What `pip install .` puts on PATH: every command in bin/, each importable from the installed packages."""

import configparser
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_setup_cfg_installs_every_command_in_bin():
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    scripts = {line.strip() for line in cfg["options"]["scripts"].splitlines() if line.strip()}
    commands = {f"bin/{p.name}" for p in (ROOT / "bin").iterdir() if p.is_file()}
    assert {"bin/pantheon", "bin/pantheon-serve", "bin/pantheon-ctl"} <= commands
    assert scripts == commands


def test_every_command_answers_help():
    for name in ("pantheon", "pantheon-serve", "pantheon-ctl", "pantheon-convert"):
        out = subprocess.run([sys.executable, str(ROOT / "bin" / name), "--help"], capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0 and "usage" in out.stdout.lower(), (name, out.stderr)
