from django import forms

from .models import ShippingAddress


class ShippingAddressForm(forms.ModelForm):
    class Meta:
        model = ShippingAddress
        fields = list(ShippingAddress.SNAPSHOT_FIELDS)
        widgets = {
            "recipient": forms.TextInput(attrs={"autocomplete": "name"}),
            "phone": forms.TextInput(attrs={"autocomplete": "tel", "inputmode": "tel"}),
            "country": forms.Select(attrs={"autocomplete": "country"}),
            "region": forms.TextInput(attrs={"autocomplete": "address-level1"}),
            "city": forms.TextInput(attrs={"autocomplete": "address-level2"}),
            "line1": forms.TextInput(attrs={"autocomplete": "address-line1"}),
            "line2": forms.TextInput(attrs={"autocomplete": "address-line2"}),
            "postal_code": forms.TextInput(attrs={"autocomplete": "postal-code"}),
        }
