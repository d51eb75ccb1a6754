"""Running a graph: the memory plan, the node-by-node executor, the level-3 static plan and its
steps (each a call of the core's program API), the device executor of cuda models, profiles."""
