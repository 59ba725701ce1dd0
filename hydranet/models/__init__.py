"""HydraNet model parts: backbones, BiFPN neck, the multi-task network and loss balancing."""
from hydranet.models.backbones import BACKBONES, build_backbone, register_backbone
from hydranet.models.balancing import BALANCERS, build_balancer
from hydranet.models.bifpn import BiFPN
from hydranet.models.config import ModelConfig, TaskConfig
from hydranet.models.hydranet import HydraNet, build_model

__all__ = ["BACKBONES", "BALANCERS", "BiFPN", "HydraNet", "ModelConfig", "TaskConfig", "build_backbone",
           "build_balancer", "build_model", "register_backbone"]
