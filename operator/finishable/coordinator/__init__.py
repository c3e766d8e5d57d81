"""Split enumerators run as operator coordinators in the driver (FLIP-27, OperatorCoordinator)."""
