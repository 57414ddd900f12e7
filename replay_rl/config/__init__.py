"""The run configuration, one module per role; `RunConfig` (config/root.py) is the root every command loads."""

from replay_rl.config.cluster import ClusterConfig, EmulatedClusterConfig, RunSettings
from replay_rl.config.generation import GenerationConfig, HFBackendConfig, VLLMBackendConfig
from replay_rl.config.learner import (AsymreLossConfig, GrpoLossConfig, LearnerConfig, NcclSyncConfig,
                                      ObjectStoreSyncConfig, SyncConfig)
from replay_rl.config.model import ModelConfig, TinyModelSpec, WarmstartConfig
from replay_rl.config.replay import (FifoReplayConfig, LifoOnceReplayConfig, PositiveBiasReplayConfig, RateLimitConfig,
                                     ReplayConfig)
from replay_rl.config.root import RunConfig
from replay_rl.config.tasks import (ArithmeticTaskConfig, CountdownTaskConfig, DatasetTaskConfig, JsonlMathTaskConfig,
                                    TaskConfig)
from replay_rl.config.tracking import TrackingConfig
from replay_rl.config_errors import ConfigError

__all__ = ["ArithmeticTaskConfig", "AsymreLossConfig", "ClusterConfig", "ConfigError", "CountdownTaskConfig",
           "DatasetTaskConfig", "EmulatedClusterConfig", "FifoReplayConfig", "GenerationConfig", "GrpoLossConfig",
           "HFBackendConfig", "JsonlMathTaskConfig", "LearnerConfig", "LifoOnceReplayConfig", "ModelConfig",
           "NcclSyncConfig", "ObjectStoreSyncConfig", "PositiveBiasReplayConfig", "RateLimitConfig", "ReplayConfig",
           "RunConfig", "RunSettings", "SyncConfig", "TaskConfig", "TinyModelSpec", "TrackingConfig",
           "VLLMBackendConfig", "WarmstartConfig"]
