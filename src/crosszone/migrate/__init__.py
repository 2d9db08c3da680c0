"""Migration from legacy gateways to crosszone gateways under live traffic (`crosszone migrate`)."""
