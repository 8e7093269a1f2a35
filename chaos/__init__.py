"""The chaos suite: real ``harness-worker`` and ``harness-supervisor`` processes against a
real SQLite or PostgreSQL store, faults injected on purpose (kill -9 mid-tool, SIGSTOP past
the lease, cut database connections, supervisor leader killed, PostgreSQL restarted, a
rolling restart), and invariants checked afterwards from the database and an external
effects ledger. Run it with ``python -m chaos``; see ``docs/chaos.md``.

Modules: ``cli`` (the command), ``runner`` (one scenario end to end), ``scenarios`` (the
faults), ``fleet`` (the processes), ``proxy`` (cutting connections), ``plan`` and
``agents`` (the workload the workers run), ``workload`` (the suite submitting and
answering runs), ``ledger`` (the external effects), ``db`` and ``dataset`` (reading it all
back), ``checker`` (the invariants), ``timings`` and ``report``.
"""

from __future__ import annotations
