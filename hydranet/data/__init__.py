"""hydranet.data: datasets that give the in-memory sample of docs/dataset_format.md."""
from hydranet.data.reader import DatasetError
from hydranet.data.sim_reader import SimDataset

__all__ = ["DatasetError", "SimDataset"]
