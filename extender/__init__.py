"""The scheduler extender: filter and score nodes by free MIG instances and fragmentation."""
