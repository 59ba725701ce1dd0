"""The old name of the sim reader, kept so callers outside hydranet/data keep working: the sim
format's reader and checks live in `hydranet.data.sim_reader`, the base reader (`FrameReader`,
`DatasetError`, the label limits) in `hydranet.data.reader`. New code imports from those."""
from hydranet.data.reader import BBOX_SLACK_PX, MAX_BOX_CENTER_M, MAX_BOX_SIZE_M, MAX_SPEED_MPS, DatasetError, FrameReader
from hydranet.data.sim_reader import (BEV_FILE, CHANNEL_SUFFIX, CHANNELS, DRIVABLE_CLASSES, FORMAT, LABEL_CHANNELS,
                                      PIXEL_HEADS, SIM_HEADS, VERSION, SimDataset, check_labels, check_meta, check_scene,
                                      decode_depth, decode_normals, read_image)

__all__ = ["BBOX_SLACK_PX", "BEV_FILE", "CHANNELS", "CHANNEL_SUFFIX", "DRIVABLE_CLASSES", "DatasetError", "FORMAT",
           "FrameReader", "LABEL_CHANNELS", "MAX_BOX_CENTER_M", "MAX_BOX_SIZE_M", "MAX_SPEED_MPS", "PIXEL_HEADS",
           "SIM_HEADS", "SimDataset", "VERSION", "check_labels", "check_meta", "check_scene", "decode_depth",
           "decode_normals", "read_image"]
