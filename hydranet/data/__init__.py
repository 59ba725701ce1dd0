"""hydranet.data: datasets that give the in-memory sample of docs/dataset_format.md."""
from hydranet.data.dataset import DatasetError, SimDataset

__all__ = ["DatasetError", "SimDataset"]
