"""The GPU lease's scheduler, behind ``bash scripts/gpu-campaign.sh``: the open experiments as tasks, launched in
priority order as many at a time as the machine holds, each once the state it starts from exists; a report every
minute; and what the device tool brings back packed into $OUT (the format: :mod:`lab.records.lease`).

    python -m lab.campaign start GROUP     # write the plan of GROUP (or all) and start the scheduler in its
                                               # own session (it outlives the call that started it)
    python -m lab.campaign watch SECONDS   # report and pack every CAMPAIGN_REPORT_SECONDS until SECONDS have
                                               # passed or every task has ended; then a one-screen summary
    python -m lab.campaign unpack FILE...  # a previous lease's files into the store, before start (a large
                                               # state's volumes may come over several calls: see below)
    python -m lab.campaign schedule        # the scheduler's loop (start runs it)

A task is one command: an ``fl.run`` through scripts/resumable.sh's ``run`` (skipped when finished, resumed when
started), the DDPM sets' trainer, or the benchmark. Its priority orders the launches; ``needs`` is the file it
starts from (FedCOG's arm: its FedAvg run's checkpoint_round49.pt; HFMDs' FedAvg, FMDS and lr/10 arms: the HFMDs
run's checkpoint_round19.pt; DynaFed's FedAvg and control arms: the DynaFed arm's round-19 or round-23 state),
written by the task ``after``; ``slots``: the processes it runs (the DDPM trainer: DDPM_WORKERS). The limit on
slots at once is CAMPAIGN_JOBS, else the smaller of the CPU cores and the free GPU memory over
CAMPAIGN_GIB_PER_RUN (4) GiB; every process runs one torch thread (OMP_NUM_THREADS = 1). On top of the slots,
each task is admitted by its peak GPU memory (``gib``, else its kind's: :data:`KIND_GIB`), checked again before
every launch: the running tasks' memory plus its own stays within MARGIN of the device, and the free memory now
holds it; the task then runs capped at it (``$SHUFFLEFL_GPU_GIB``: fl.run sets
``torch.cuda.set_per_process_memory_fraction``). An out-of-memory task goes back to the queue with 1.5 times its
memory. A task of a large state (``large_state``: DynaFed's arms, whose state comes back only in volumes over
several calls, below) starts only when its predicted minutes (``minutes``, else lab/cost.py's FLOPs at the planned
rates or CAMPAIGN_RATES' for the rounds its run has left, :func:`predict`) fit in what is left of the lease
(``start``'s SECONDS); otherwise it is "skipped", saying why: bringing its state home and back costs more calls
than the minutes it would run. Processes on one GPU share it
in time slices (the 2026-11-27 lease: an HFMDs round took 23 s among 16 processes, 12.7 s among 9), so it must fit
beside the work already started: the scheduler books the chip, each start adding its predicted minutes to when the
started work ends at the latest (reset when the chip is idle), and such a task, or any task while one runs, starts
only when that end stays within the lease; otherwise it waits (strict priority: the chip drains first). With
CAMPAIGN_FLEET=N
(N > 1), the fl.run tasks ready in one pass start as one ``python -m fl.fleet`` process of up to N runs (one slot,
their memory together; :mod:`fl.fleet`: their clients' training computed together), each task done when its own run
finished (tested on the CPU; not yet run on a GPU).

The store (SHUFFLEFL_RUNS) holds ``runs/NAME/`` and ``synthetic/`` as the experiment scripts lay them out,
``logs/NAME.log`` per task and ``campaign/status.json`` (the scheduler's state, which ``watch`` reads). What comes
back (:func:`pack`): the records of every run, the DDPM sets, then each unfinished run's state by priority, within
the device tool's limits (CAMPAIGN_MAX_FILES 8 files of CAMPAIGN_MAX_FILE_MIB 15, CAMPAIGN_MAX_TOTAL_MIB 60
together; CAMPAIGN_STATE_MIB caps the state alone). The state archives fill in priority order, so ``state-1.tar``
holds the first priorities: the one to carry to the next lease, where the code (~13 MB) and Fashion-MNIST (30 MB)
leave about 20 MiB of the tool's 64 MiB; the others continue at home. Measured checkpoints: a FedCOG arm 1.96 MB
(the server model and 10 clients' local models, which FedCOG needs), its FedAvg run 0.18 MB, an HFMDs run after a
synthesis 9.0 MB (its pool of 2,000 images), an HFMDs-protocol FedAvg 2.3 MB; no algorithm here keeps client
state, and every random draw derives from (seed, round, client), so nothing else is needed. DynaFed's runs keep
every client's Adam moments (206 MB measured at width 128; 412 MB with its round-19 checkpoint while an arm still
starts from that): a state that does not fit one archive goes in volumes (:mod:`lab.campaign.volumes`), cut into
``STORE/campaign/volumes/NAME/`` as volumes of CAMPAIGN_MAX_FILE_MIB with a manifest, each call bringing as many as
the room left holds, those not yet sent first (three of 15 MiB beside the records: 206 MB in 14 volumes over five
calls, tested; ``gpu-campaign.sh wait 0`` on the warm machine is a call that only packs); ``sent.json`` records
which call took which. The summary says how many of N are back and what brings the rest; the intake at home and
``unpack`` gather the volumes of several calls and place the run, resumable, once all are there.

CAMPAIGN_PLAN names a JSON list of tasks ({"name", "priority", "args" of fl.run, "run", "needs", "after",
"large_state"}) that replaces the built-in plan (the tests' tiny runs). Every input is checked before anything
starts, each failure one line naming it (exit 2): the plan (:func:`~lab.campaign.tasks.custom_plan`), every CAMPAIGN_*
number (:func:`~lab.campaign.schedule.check_settings`), the status (:func:`~lab.campaign.status.read_status`), a store
or OUT that cannot be written (the path and why); ``unpack`` refuses an archive with a link or a name twice, and
puts a lease's state beside a run here of another config rather than dropping it, as the intake does
(:func:`lab.records.lease.read_archive`, :func:`lab.records.lease.place_run`).

The package's modules, each with one job: :mod:`~lab.campaign.tasks` (the experiments as tasks),
:mod:`~lab.campaign.status` (the store: status, logs, run folders; nvidia-smi), :mod:`~lab.campaign.predict` (each
task's FLOPs and minutes: ``plan``), :mod:`~lab.campaign.pack` (what comes back, and a previous lease's files in),
:mod:`~lab.campaign.volumes` (a large state out in volumes over several calls),
:mod:`~lab.campaign.schedule` (admission and launches), :mod:`~lab.campaign.report` (the reports and the summary);
``python -m lab.campaign`` (:mod:`lab.campaign.__main__`) and ``scripts/campaign.py`` are its entry points.
"""
