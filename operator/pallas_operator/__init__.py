"""Pallas operator: reconciles PallasDeployment and PallasAgent resources into running agents."""
