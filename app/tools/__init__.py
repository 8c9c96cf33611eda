"""Tools the model may call: the `Tool` interface, the validating registry, workspace file tools."""
