"""The records of runs, in a room of their own below the artefact pipeline: the run ledger (:mod:`lab.records.ledger`:
what it keeps of a run and adding to it), its check (:mod:`lab.records.check`: every file whole and as it was added),
a GPU lease's archives and their intake (:mod:`lab.records.lease`), a run's state too large for one file in volumes
(:mod:`lab.records.volumes`), and the names they share (:mod:`lab.records.keys`).

``figures`` reads these records to rebuild REPORT; nothing here imports ``figures``. Imports run one way inside:
keys, volumes <- check <- ledger <- lease.
"""
