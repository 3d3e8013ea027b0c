"""Slurm access: typed records, the client interface, the CLI backend and its parsers."""

from mirage.slurm.cli_backend import CliSlurmClient, sbatch_options
from mirage.slurm.client import SlurmClient
from mirage.slurm.parse import (
    detect_shape,
    map_state,
    parse_sacct_json,
    parse_sbatch_parsable,
    parse_scontrol_config,
    parse_scontrol_oneliner,
    parse_squeue_json,
    parse_start_estimates,
    parse_test_only,
)
from mirage.slurm.run import (
    CommandResult,
    Runner,
    SubprocessRunner,
    check_result,
    clean_environment,
    is_unreachable,
)
from mirage.slurm.types import (
    JobState,
    QueueSnapshot,
    SlurmError,
    SlurmJob,
    SlurmParseError,
    SlurmTimeoutError,
    SlurmUnreachableError,
    StartEstimate,
    SubmitError,
    SubmitRequest,
)

__all__ = [
    "CliSlurmClient",
    "CommandResult",
    "JobState",
    "QueueSnapshot",
    "Runner",
    "SlurmClient",
    "SlurmError",
    "SlurmJob",
    "SlurmParseError",
    "SlurmTimeoutError",
    "SlurmUnreachableError",
    "StartEstimate",
    "SubmitError",
    "SubmitRequest",
    "SubprocessRunner",
    "check_result",
    "clean_environment",
    "detect_shape",
    "is_unreachable",
    "map_state",
    "parse_sacct_json",
    "parse_sbatch_parsable",
    "parse_scontrol_config",
    "parse_scontrol_oneliner",
    "parse_squeue_json",
    "parse_start_estimates",
    "parse_test_only",
    "sbatch_options",
]
