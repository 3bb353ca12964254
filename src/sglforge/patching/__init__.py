"""patching"""
