"""wheel"""
