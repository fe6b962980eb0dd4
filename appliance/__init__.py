"""appliance"""
