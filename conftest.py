"""Settings shared by every test process of the monorepo (pytest loads this file before any package's tests)."""

import os

# Ray starts its worker processes 15 nice levels below the process that started the cluster. In two test processes
# (scripts/test.sh runs pytest-xdist) both share one scheduling group, so a CPU-bound test at nice 0 in one process
# left the other's Ray actors about 3 % of a core: a Ray trainer test that takes 14 s alone did not finish in 400 s
# beside two nice-0 busy loops, and took 23 s with its workers at nice 0. Tests run Ray's workers at the nice level
# of the process that starts them, so both test processes share the cores fairly. A value set by the caller wins.
os.environ.setdefault("RAY_worker_niceness", "0")
