from django.db import models


class Order(models.Model):
    customer = models.CharField(max_length=100)
    total_cents = models.IntegerField()
    paid = models.BooleanField(default=False)
