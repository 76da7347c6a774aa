"""`python -m tinker_engine`: frames on standard output, everything else on standard error.

Before any library is imported, file descriptor 1 is moved aside for frames and replaced by standard
error, so nothing a library prints (Python or native code) can reach the frame stream.
"""

import os
import sys

for name, value in (
    ("HF_HUB_OFFLINE", "1"),
    ("TRANSFORMERS_OFFLINE", "1"),
    ("HF_HUB_DISABLE_PROGRESS_BARS", "1"),
    ("TRANSFORMERS_VERBOSITY", "error"),
):
    os.environ.setdefault(name, value)

sys.stdout.flush()
frames = os.fdopen(os.dup(1), "wb")
os.dup2(2, 1)
sys.stdout = sys.stderr

from .server import main  # noqa: E402 - imported only once standard output is set aside

code = main(output=frames)
# The server's frame reader (server.py) is a daemon thread blocked on standard input: finalizing the
# interpreter while it holds that stream's lock aborts the process (SIGABRT), so the engine leaves
# without finalizing, once everything written is flushed.
for stream in (frames, sys.stderr):
    try:
        stream.flush()
    except OSError:
        pass  # the worker closed the pipe: nothing more can reach it
os._exit(code)
