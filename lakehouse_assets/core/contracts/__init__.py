"""Data contracts: declared once, enforced inside the write's own job before anything lands, written into both formats.

The model and the rule checks are light to import (the Dagster layer loads them in every process); the write's
hook (`guard.enforced`) brings the table machinery with it and is imported by the write path itself."""

from .model import CONTRACT_PROPERTY, Contract, ContractError, ContractViolation

__all__ = ["CONTRACT_PROPERTY", "Contract", "ContractError", "ContractViolation"]
