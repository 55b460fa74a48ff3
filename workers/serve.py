"""`pantheon-serve`: parse flags, discover dies, place models, run the supervisor until stopped."""

import sys

from pantheon.errors import PantheonError, UsageError
from pantheon.serve.dies import discover_dies, resolve_placement
from pantheon.serve.settings import HelpRequested, parse_serve_args, usage_text
from workers.supervisor import Supervisor


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        config = parse_serve_args(argv)
    except HelpRequested:
        print(usage_text())
        return 0
    except UsageError as e:
        print(f"pantheon-serve: {e}\n(see pantheon-serve --help)", file=sys.stderr)
        return 2
    try:
        return run(config)
    except UsageError as e:
        print(f"pantheon-serve: {e}", file=sys.stderr)
        return 2
    except PantheonError as e:
        print(f"pantheon-serve: {e}", file=sys.stderr)
        return 1


def run(config):
    dies = discover_dies(config.cpu_dies)
    resolve_placement(config, dies)
    sup = Supervisor(config, dies)
    try:
        sup.start()
        return sup.run()
    finally:
        sup.close()
