"""Qualification of a wheel set, beside the smoke in the flow (the smoke calls it): PD
output equals a colocated server's (equivalence), outputs match a recorded reference
(reference, greedy), the profile's acceptance gates (gates, qualprofile), the model's
identity (identity) and the signed receipt bound to the wheel set (receipt); `qualify.py`
strings them together. It reads the wheel set (wheel/wheelset.py), never builder/.
"""
