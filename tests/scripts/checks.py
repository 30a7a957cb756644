"""What the scripts' Python tests share: a check that counts its failures, and the summary line
and exit status at the end."""
import sys

fails = 0


def check(cond, what):
    global fails
    if not cond:
        print("FAIL", what)
        fails += 1


def finish(name):
    """Prints NAME's summary and exits, non-zero when a check failed."""
    print(f"{name}: ok" if fails == 0 else f"{name}: {fails} failed")
    sys.exit(1 if fails else 0)
