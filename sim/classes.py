"""Label vocabularies of the simulator (written into dataset.json; readers take them from there)."""

BOX3D_CLASSES = ("car", "truck", "bus", "pedestrian", "cyclist", "traffic_cone", "debris",  # road users and
                 "construction_vehicle", "barrier", "trailer", "motorcycle")  # things on or by the road
OBJECT_CLASSES = BOX3D_CLASSES + ("traffic_sign", "traffic_light")
SEMANTIC_CLASSES = ("sky", "road", "lane_marking", "crosswalk", "sidewalk", "curb", "terrain", "building",
                    "vegetation", "pole") + OBJECT_CLASSES
LANE_TYPES = ("solid_white", "dashed_white", "solid_yellow")
SEMANTIC_ID = {name: i for i, name in enumerate(SEMANTIC_CLASSES)}
