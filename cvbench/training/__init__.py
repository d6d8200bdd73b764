"""Training: the Horovod-aware Trainer, its configuration, optimizers and schedules."""

from cvbench.training.config import OptimizerConfig, ScheduleConfig, TrainConfig
from cvbench.training.determinism import request_deterministic_xla
from cvbench.training.distributed import Distribution, Horovod, SingleProcess, get_distribution
from cvbench.training.optimizers import LARS, MomentumSGD, build_optimizer
from cvbench.training.schedules import WarmupSchedule, build_schedule
from cvbench.training.signals import TrainingInterruptedError
from cvbench.training.throughput import ThroughputSummary
from cvbench.training.trainer import Trainer

__all__ = [
    "LARS",
    "Distribution",
    "Horovod",
    "MomentumSGD",
    "OptimizerConfig",
    "ScheduleConfig",
    "SingleProcess",
    "ThroughputSummary",
    "TrainConfig",
    "Trainer",
    "TrainingInterruptedError",
    "WarmupSchedule",
    "build_optimizer",
    "build_schedule",
    "get_distribution",
    "request_deterministic_xla",
]
