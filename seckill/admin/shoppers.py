"""The shoppers' records staff keep by hand: the blacklist and the shoppers' profiles (each
save goes through seckill.purchase.shoppers, which keeps the purchase's cache of them fresh)."""

from django.contrib import admin

from seckill.models import BlacklistEntry, ShopperProfile
from seckill.purchase.shoppers import blacklist_entries_delete, blacklist_entry_save, shopper_profile_save


@admin.register(BlacklistEntry)
class BlacklistEntryAdmin(admin.ModelAdmin):
    list_display = ["kind", "value", "reason", "expires_at", "created_at"]
    list_filter = ["kind"]
    search_fields = ["value", "reason"]

    def save_model(self, request, obj, form, change):
        blacklist_entry_save(entry=obj)

    def delete_model(self, request, obj):
        blacklist_entries_delete(queryset=BlacklistEntry.objects.filter(pk=obj.pk))

    def delete_queryset(self, request, queryset):
        blacklist_entries_delete(queryset=queryset)


@admin.register(ShopperProfile)
class ShopperProfileAdmin(admin.ModelAdmin):
    list_display = ["user", "member_level", "updated_at"]
    search_fields = ["user__username"]
    autocomplete_fields = ["user"]

    def save_model(self, request, obj, form, change):
        shopper_profile_save(profile=obj)
