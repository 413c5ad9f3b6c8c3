"""Thin Dagster layers over the core: resources, the IO manager, checks, jobs, schedules, sensors."""
