from django.urls import path
from shop import views

urlpatterns = [
    path("enqueue/<str:name>/", views.enqueue),
    path("enqueue-rolled-back/", views.enqueue_rolled_back),
    path("result/<str:name>/<str:result_id>/", views.result),
]
