"""The `cvbench demo`: synthetic shapes data, a ResNet classifier and an SSD, end to end.

Modules: `shapes` (drawing one image), `shapes_data` (writing the raw data sets once),
`plots` (the PNG files), `run` (the demo itself).
"""
