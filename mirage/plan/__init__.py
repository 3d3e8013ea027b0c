"""``mirage plan``: choose a chain's shape (partition, GPUs, segment limit) by its
predicted completion from the present queue.

- :mod:`.work`: the work left (``96h@4gpu``) and how it scales with the size;
- :mod:`.shapes`: the candidate shapes (defaults from the cluster profile);
- :mod:`.queue`: each shape's predicted start from one queue snapshot;
- :mod:`.predict`: the chain's completion per shape, its interval, the ranking;
- :mod:`.source`: the snapshot read from a Slurm client, the habitual shape, a trained
  forecaster as a source of waits;
- :mod:`.report`: the table.

Example, against the simulator or the cluster (any ``SlurmClient``)::

    from mirage.plan import Options, candidates, parse_work, plan_chain, read_snapshot
    work = parse_work("96h@4gpu", scaling="linear")
    q = read_snapshot(client, profile)
    plan = plan_chain(q, work, candidates(profile, work, overhead_s=600),
                      options=Options(overhead_s=600, draws=4))
    print(plan.recommended.shape)
"""

from mirage.plan.predict import Candidate, Options, Plan, plan_chain
from mirage.plan.queue import Snapshot, start_times
from mirage.plan.shapes import Shape, candidates
from mirage.plan.source import habitual_shape, policy_forecast, read_snapshot
from mirage.plan.work import PlanInputError, Work, parse_work

__all__ = [
    "Candidate",
    "Options",
    "Plan",
    "PlanInputError",
    "Shape",
    "Snapshot",
    "Work",
    "candidates",
    "habitual_shape",
    "parse_work",
    "plan_chain",
    "policy_forecast",
    "read_snapshot",
    "start_times",
]
