"""Label vocabularies of the simulator (written into dataset.json; readers take them from there)."""

OBJECT_CLASSES = ("car", "truck", "bus", "pedestrian", "cyclist", "traffic_cone", "debris",
                  "construction_vehicle", "traffic_sign", "traffic_light")
BOX3D_CLASSES = OBJECT_CLASSES[:8]  # road users and things on the road
SEMANTIC_CLASSES = ("sky", "road", "lane_marking", "crosswalk", "sidewalk", "curb", "terrain", "building",
                    "vegetation", "pole") + OBJECT_CLASSES
LANE_TYPES = ("solid_white", "dashed_white", "solid_yellow")
SEMANTIC_ID = {name: i for i, name in enumerate(SEMANTIC_CLASSES)}
