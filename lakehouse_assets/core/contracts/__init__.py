"""Data contracts: declared once, enforced inside the write's own job before anything lands, written into both formats."""

from .guard import enforced
from .model import CONTRACT_PROPERTY, Contract, ContractError, ContractViolation

__all__ = ["CONTRACT_PROPERTY", "Contract", "ContractError", "ContractViolation", "enforced"]
