from django import forms
from django.utils.translation import gettext_lazy as _

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

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Optional in the model (some places have none), required by ShippingAddress.clean elsewhere.
        self.fields["postal_code"].help_text = _("Not needed in Hong Kong, Macao or the United Arab Emirates.")
